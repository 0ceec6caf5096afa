import { execFile } from 'node:child_process';
import { promisify } from 'node:util';

import { ApiKeysService } from '../src/auth/api-keys.service.js';
import { postJob } from './factories/index.js';
import { bearer, startTestApp, type TestApp } from './helpers/app.js';
import { provider, writeCatalog } from './helpers/catalog.js';
import { sleep, waitFor } from './helpers/wait.js';

type JobBody = {
  id: string;
  status: string;
  attempts: Array<{ id: string; provider: string; status: string; outcome: string | null }>;
};

const run = promisify(execFile);
/** The built CLI (dist/, made by `npm test`'s pretest build) against the test's database. */
const apikey = (url: string, ...args: string[]) =>
  run(process.execPath, ['dist/src/auth/apikey.cli.js', ...args], {
    env: { PATH: process.env.PATH ?? '', DATABASE_URL: url, MIGRATIONS_RUN: 'false' },
  });

const keyIdOf = async (t: TestApp, ownerId: string): Promise<string> =>
  (
    await t.dataSource.query('SELECT id FROM api_keys WHERE owner_id = $1 ORDER BY created_at DESC LIMIT 1', [ownerId])
  )[0].id;

describe('operators act across owners, by scope (I7)', () => {
  let t: TestApp;
  let alice: string;
  let bob: string;
  let operator: string;
  let reader: string;

  beforeAll(async () => {
    t = await startTestApp({
      role: 'all',
      catalogFile: writeCatalog((c) => c.providers.push({ ...provider(c, 'sim-hang'), name: 'sim-hang-resolve' })),
      workerPollMs: 10,
      reconcileIntervalMs: 100,
    });
    alice = await t.key('alice', ['jobs:write', 'jobs:read']);
    bob = await t.key('bob', ['jobs:write', 'jobs:read']);
    operator = await t.key('ops-team', ['attempts:resolve', 'ops:read']);
    reader = await t.key('qa-team', ['ops:read']);
    const certifier = await t.key('admin', ['providers:certify']);
    const certified = await t
      .http()
      .post('/v1/providers/sim-fallback/certifications')
      .set(bearer(certifier))
      .send({ operation: 'summarize' });
    expect(certified.body.passed).toBe(true);
  });
  afterAll(() => t.close());

  const create = async (key: string, idempotencyKey: string, providers?: string[]) =>
    (await postJob(t, key, { idempotencyKey, providers, input: { text: 'ops' } })) as JobBody;
  const job = async (key: string, id: string) =>
    (await t.http().get(`/v1/jobs/${id}`).set(bearer(key))).body as JobBody;

  it("resolves another owner's unknown attempt with an operator key, finds it in the queue first, and records the actor", async () => {
    const created = await create(alice, 'hang-for-ops', ['sim-hang', 'sim-fallback']);
    await waitFor(
      () => job(alice, created.id),
      (j) => j.status === 'unknown',
    );

    const queue = await t.http().get('/v1/ops/attempts?status=unknown&provider=sim-hang').set(bearer(operator));
    expect(queue.status).toBe(200);
    const waiting = queue.body.items.find((a: { jobId: string }) => a.jobId === created.id);
    expect(waiting).toMatchObject({ owner: 'alice', provider: 'sim-hang', status: 'unknown', number: 1 });
    expect(waiting.waitedSeconds).toBeGreaterThanOrEqual(0);
    expect(Date.parse(waiting.deadlineAt)).toBeLessThanOrEqual(Date.now());
    const notYet = await t.http().get('/v1/ops/attempts?olderThan=3600').set(bearer(operator));
    expect(notYet.body.items.some((a: { jobId: string }) => a.jobId === created.id)).toBe(false);

    const resolved = await t
      .http()
      .post(`/v1/attempts/${waiting.attemptId}/resolve`)
      .set(bearer(operator))
      .send({ status: 'cancelled', reason: 'provider confirmed the request was dropped' });
    expect(resolved.status).toBe(200);
    const done = await waitFor(
      () => job(alice, created.id),
      (j) => j.status === 'succeeded',
    );
    expect(done.attempts.map((a) => [a.provider, a.status, a.outcome])).toEqual([
      ['sim-hang', 'cancelled', null],
      ['sim-fallback', 'succeeded', 'won'],
    ]);

    const operatorKeyId = await keyIdOf(t, 'ops-team');
    const events = await t.http().get(`/v1/jobs/${created.id}/events`).set(bearer(alice));
    expect(events.status).toBe(200);
    const resolution = events.body.items.find((e: { reason: string }) => e.reason === 'resolved_by_operator');
    expect(resolution).toMatchObject({
      subject: 'attempt',
      attemptId: waiting.attemptId,
      from: 'unknown',
      to: 'cancelled',
      actor: { keyId: operatorKeyId, owner: 'ops-team' },
    });
    const ids = events.body.items.map((e: { id: string }) => Number(e.id));
    expect(ids).toEqual([...ids].sort((x, y) => x - y));
    expect(ids.length).toBeGreaterThanOrEqual(10); // past one digit: ordered as numbers, not as text
    const paged: string[] = [];
    let cursor: string | null = null;
    do {
      const page: { body: { items: Array<{ id: string }>; nextCursor: string | null } } = await t
        .http()
        .get(`/v1/jobs/${created.id}/events?limit=3${cursor ? `&cursor=${cursor}` : ''}`)
        .set(bearer(operator));
      paged.push(...page.body.items.map((e) => e.id));
      cursor = page.body.nextCursor;
    } while (cursor);
    expect(paged).toEqual(events.body.items.map((e: { id: string }) => e.id));
    const created_ = events.body.items[0];
    expect(created_).toMatchObject({ subject: 'job', from: null, to: 'pending', reason: 'created', actor: null });
    const rows = await t.dataSource.query(
      `SELECT count(*)::int AS n FROM job_events WHERE job_id = $1 AND actor_key_id = $2`,
      [created.id, operatorKeyId],
    );
    expect(rows[0].n).toBeGreaterThanOrEqual(1);
  });

  it("answers a resolve with the attempt and the job's id and status only: never the owner's input, key or result", async () => {
    const resolver = await t.key('resolvers', ['attempts:resolve']);
    const created = await t
      .http()
      .post('/v1/jobs')
      .set(bearer(alice))
      .set('Idempotency-Key', 'hang-for-resolver')
      .send({ operation: 'summarize', input: { text: 'a secret of alice' }, providers: ['sim-hang-resolve'] });
    expect(created.status).toBe(201);
    const held = await waitFor(
      () => job(alice, created.body.id),
      (j) => j.status === 'unknown',
    );
    const resolved = await t
      .http()
      .post(`/v1/attempts/${held.attempts[0].id}/resolve`)
      .set(bearer(resolver))
      .send({ status: 'failed', reason: 'dropped' });
    expect(resolved.status).toBe(200);
    expect(Object.keys(resolved.body).sort()).toEqual(['attempt', 'job']);
    expect(resolved.body.attempt).toMatchObject({
      id: held.attempts[0].id,
      number: 1,
      provider: 'sim-hang-resolve',
      status: 'failed',
    });
    expect(Object.keys(resolved.body.job).sort()).toEqual(['id', 'status', 'version']);
    expect(resolved.body.job.id).toBe(created.body.id);
    expect(JSON.stringify(resolved.body)).not.toMatch(/a secret of alice|hang-for-resolver/);
  });

  it("keeps owners walled off: another owner's job and its events answer 404, and its attempts cannot be resolved by an owner key", async () => {
    const created = await create(alice, 'walled');
    const done = await waitFor(
      () => job(alice, created.id),
      (j) => j.status === 'succeeded',
    );
    expect((await t.http().get(`/v1/jobs/${created.id}`).set(bearer(bob))).status).toBe(404);
    const events = await t.http().get(`/v1/jobs/${created.id}/events`).set(bearer(bob));
    expect(events.status).toBe(404);
    expect(events.body.code).toBe('not_found');
    const resolve = await t
      .http()
      .post(`/v1/attempts/${done.attempts[0].id}/resolve`)
      .set(bearer(bob))
      .send({ status: 'failed', reason: 'x' });
    expect(resolve.status).toBe(403);
    expect((await t.http().get(`/v1/jobs/${created.id}/events`).set(bearer(reader))).status).toBe(200);
    expect(
      (
        await t
          .http()
          .get(`/v1/jobs/${created.id}/events`)
          .set(bearer(await t.key('nobody', ['jobs:write'])))
      ).status,
    ).toBe(403);
  });

  it('lists the jobs of every owner for ops:read, filtered by owner, status or idempotency key, in keyset pages', async () => {
    const a = await create(alice, 'list-a');
    const b = await create(bob, 'list-b');
    const all = await t.http().get('/v1/ops/jobs?limit=100').set(bearer(reader));
    expect(all.status).toBe(200);
    const owners = new Map(all.body.items.map((j: { id: string; owner: string }) => [j.id, j.owner]));
    expect(owners.get(a.id)).toBe('alice');
    expect(owners.get(b.id)).toBe('bob');
    const bobs = await t.http().get('/v1/ops/jobs?owner=bob').set(bearer(reader));
    expect(bobs.body.items.every((j: { owner: string }) => j.owner === 'bob')).toBe(true);
    const byKey = await t.http().get('/v1/ops/jobs?owner=alice&idempotencyKey=list-a').set(bearer(reader));
    expect(byKey.body.items.map((j: { id: string }) => j.id)).toEqual([a.id]);
    expect((await t.http().get('/v1/ops/jobs?idempotencyKey=list-a').set(bearer(reader))).status).toBe(400);

    const seen: string[] = [];
    let cursor: string | null = null;
    do {
      const page: { body: { items: Array<{ id: string }>; nextCursor: string | null } } = await t
        .http()
        .get(`/v1/ops/jobs?limit=2${cursor ? `&cursor=${cursor}` : ''}`)
        .set(bearer(reader));
      seen.push(...page.body.items.map((j) => j.id));
      cursor = page.body.nextCursor;
    } while (cursor);
    expect(seen).toEqual(all.body.items.map((j: { id: string }) => j.id));

    const one = await t.http().get(`/v1/ops/jobs/${b.id}`).set(bearer(reader));
    expect(one.status).toBe(200);
    expect(one.body).toMatchObject({ id: b.id, owner: 'bob', idempotencyKey: 'list-b' });
    expect(Array.isArray(one.body.attempts)).toBe(true);
    expect((await t.http().get('/v1/ops/jobs/00000000-0000-4000-8000-000000000000').set(bearer(reader))).status).toBe(
      404,
    );
  });

  it('answers 403 to a key without ops:read on every /v1/ops route, and 400 to unknown or malformed parameters', async () => {
    const somebody = await create(bob, 'forbidden');
    for (const path of ['/v1/ops/attempts', '/v1/ops/jobs', `/v1/ops/jobs/${somebody.id}`, '/v1/ops/stats']) {
      const res = await t.http().get(path).set(bearer(alice));
      expect([path, res.status, res.body.code]).toEqual([path, 403, 'forbidden']);
      expect(res.headers['content-type']).toMatch(/^application\/problem\+json/);
    }
    const refused = [
      '/v1/ops/attempts?foo=1',
      '/v1/ops/attempts?status=failed',
      '/v1/ops/attempts?olderThan=-1',
      '/v1/ops/jobs?cursor=!!',
      '/v1/ops/jobs?cursor=bm9wZQ',
      '/v1/ops/stats?minutes=0',
      `/v1/jobs/${somebody.id}/events?cursor=abc`,
    ];
    for (const path of refused) {
      const res = await t.http().get(path).set(bearer(operator));
      expect([path, res.status, res.body.code]).toEqual([path, 400, 'validation_failed']);
    }
  });

  it("counts jobs created and settled per minute and each provider's attempts over the window", async () => {
    const res = await t.http().get('/v1/ops/stats?minutes=60').set(bearer(reader));
    expect(res.status).toBe(200);
    expect(res.body.perMinute).toHaveLength(60);
    const rows = await t.dataSource.query(`SELECT count(*)::int AS n FROM jobs`);
    expect(res.body.perMinute.reduce((n: number, m: { created: number }) => n + m.created, 0)).toBe(rows[0].n);
    const fallback = res.body.providers.find((p: { provider: string }) => p.provider === 'sim-fallback');
    expect(fallback.succeeded).toBeGreaterThanOrEqual(1);
    const hang = res.body.providers.find((p: { provider: string }) => p.provider === 'sim-hang');
    expect(hang).toMatchObject({ attempts: 1, timeouts: 1, cancelled: 1, unknownNow: 0 });
  });
});

describe('API keys: revocation and expiry hold at once on every replica', () => {
  let a: TestApp;
  let b: TestApp;
  beforeAll(async () => {
    a = await startTestApp();
    b = await startTestApp({}, a.database);
  });
  afterAll(async () => {
    await b.close();
    await a.close();
    await a.database.drop();
  });

  it('refuses a key revoked with `apikey revoke` on the next request to another app instance', async () => {
    const key = await a.key('revoked-owner', ['jobs:read']);
    expect((await b.http().get('/v1/jobs').set(bearer(key))).status).toBe(200);
    const id = await keyIdOf(a, 'revoked-owner');
    const revoked = await apikey(a.database.url, 'revoke', id);
    expect(revoked.stderr).toMatch(/"msg":"API key revoked"/);
    expect(revoked.stderr).toContain(id);
    const res = await b.http().get('/v1/jobs').set(bearer(key));
    expect(res.status).toBe(401);
    expect(res.body.code).toBe('key_revoked');
    expect((await a.http().get('/v1/jobs').set(bearer(key))).status).toBe(401);
    await expect(apikey(a.database.url, 'revoke', '00000000-0000-4000-8000-000000000000')).rejects.toMatchObject({
      code: 1,
    });
  });

  it('lists keys with owner, scopes and dates, never the key or its hash', async () => {
    const key = await a.key('listed-owner', ['ops:read']);
    const [{ key_hash: hash }] = await a.dataSource.query(
      `SELECT key_hash FROM api_keys WHERE owner_id = 'listed-owner'`,
    );
    const { stdout } = await apikey(a.database.url, 'list');
    const line = stdout.split('\n').find((l) => l.includes('listed-owner'))!;
    expect(line).toContain(await keyIdOf(a, 'listed-owner'));
    expect(line).toContain('ops:read');
    expect(stdout).not.toContain(key);
    expect(stdout).not.toContain(hash);
  });

  it('refuses an expired key and accepts one that has not expired yet', async () => {
    const keys = a.app.get(ApiKeysService);
    const expired = (await keys.create('expiring', ['jobs:read'], new Date(Date.now() - 1000))).key;
    const valid = (await keys.create('expiring', ['jobs:read'], new Date(Date.now() + 3_600_000))).key;
    expect((await b.http().get('/v1/jobs').set(bearer(expired))).status).toBe(401);
    expect((await b.http().get('/v1/jobs').set(bearer(valid))).status).toBe(200);
    const soon = (await keys.create('expiring', ['jobs:read'], new Date(Date.now() + 800))).key;
    expect((await b.http().get('/v1/jobs').set(bearer(soon))).status).toBe(200);
    await sleep(1000);
    expect((await b.http().get('/v1/jobs').set(bearer(soon))).status).toBe(401);
  });

  it('records last use at most once a minute, without a write on every request', async () => {
    const key = await a.key('user-of-keys', ['jobs:read']);
    const lastUsed = async () =>
      (await a.dataSource.query(`SELECT last_used_at FROM api_keys WHERE owner_id = 'user-of-keys'`))[0]
        .last_used_at as Date | null;
    expect(await lastUsed()).toBeNull();
    expect((await a.http().get('/v1/jobs').set(bearer(key))).status).toBe(200);
    const first = await waitFor(lastUsed, (at) => at !== null);
    for (let i = 0; i < 5; i++) expect((await b.http().get('/v1/jobs').set(bearer(key))).status).toBe(200);
    await sleep(200);
    expect((await lastUsed())!.getTime()).toBe(first!.getTime());
  });
});
