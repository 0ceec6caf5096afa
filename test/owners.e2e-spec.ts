import { bearer, startTestApp, type TestApp } from './helpers/app.js';
import { writeCatalog } from './helpers/catalog.js';
import { waitFor } from './helpers/wait.js';

/** Fair share settings (docs/design.md#fair-share): admins set them, with a record of who did; operators read the queues. */
describe('PUT /v1/ops/owners/:owner and GET /v1/ops/owners', () => {
  let t: TestApp;

  beforeAll(async () => {
    t = await startTestApp();
  });
  afterAll(() => t.close());
  beforeEach(() => t.truncate());

  const put = (owner: string, body: unknown, key: string) =>
    t
      .http()
      .put(`/v1/ops/owners/${owner}`)
      .set(bearer(key))
      .send(body as object);

  it('refuses a key without owners:write with 403 and changes nothing', async () => {
    for (const scopes of [['jobs:write', 'jobs:read'], ['ops:read'], ['budgets:write']] as const) {
      const key = await t.key('team-x', [...scopes]);
      const res = await put('team-x', { weight: 5 }, key);
      expect(res.status).toBe(403);
    }
    const rows = await t.dataSource.query('SELECT count(*)::int AS n FROM owner_shares');
    expect(rows[0].n).toBe(0);
  });

  it('refuses a weight outside 1..100, a negative or fractional cap, and an unknown field, naming it', async () => {
    const admin = await t.key('platform', ['owners:write']);
    for (const body of [
      { weight: 0 },
      { weight: 101 },
      { weight: 1.5 },
      {},
      { weight: 1, maxConcurrency: -1 },
      { weight: 1, maxConcurrency: 2.5 },
      { weight: 1, cap: 3 },
    ]) {
      const res = await put('team-x', body, admin);
      expect({ body, status: res.status, code: res.body.code }).toEqual({
        body,
        status: 400,
        code: 'validation_failed',
      });
    }
  });

  it('sets weight and cap, records the acting key, and lists owners with their queued and in-flight jobs', async () => {
    const admin = await t.key('platform', ['owners:write', 'ops:read']);
    const owner = await t.key('team-x', ['jobs:write', 'jobs:read']);
    for (let i = 0; i < 3; i++) {
      const res = await t
        .http()
        .post('/v1/jobs')
        .set(bearer(owner))
        .set('Idempotency-Key', `k${i}`)
        .send({ operation: 'summarize', input: { text: 'x' } });
      expect(res.status).toBe(201);
    }
    const set = await put('team-x', { weight: 3, maxConcurrency: 7 }, admin);
    expect(set.status).toBe(200);
    expect(set.body).toMatchObject({
      ownerId: 'team-x',
      weight: 3,
      maxConcurrency: 7,
      queued: 3,
      inFlight: 0,
      unknown: 0,
    });
    const cleared = await put('team-x', { weight: 2, maxConcurrency: null }, admin);
    expect(cleared.body).toMatchObject({ weight: 2, maxConcurrency: null });

    const changes = await t.dataSource.query(
      'SELECT owner_id, weight, max_concurrency, actor_owner, actor_key_id IS NOT NULL AS keyed FROM owner_share_changes ORDER BY id',
    );
    expect(changes).toEqual([
      { owner_id: 'team-x', weight: 3, max_concurrency: 7, actor_owner: 'platform', keyed: true },
      { owner_id: 'team-x', weight: 2, max_concurrency: null, actor_owner: 'platform', keyed: true },
    ]);

    const listed = await t.http().get('/v1/ops/owners').set(bearer(admin));
    expect(listed.status).toBe(200);
    expect(listed.body.items).toEqual([
      expect.objectContaining({ ownerId: 'team-x', weight: 2, maxConcurrency: null, queued: 3, inFlight: 0 }),
    ]);
    const operator = await t.key('ops', ['ops:read']);
    expect((await t.http().get('/v1/ops/owners').set(bearer(operator))).status).toBe(200);
    expect((await t.http().get('/v1/ops/owners').set(bearer(owner))).status).toBe(403);
  });
});

/**
 * An owner's cap counts calls in flight, not jobs `running`: a job between attempts (a retry's back-off) is `running`
 * with no call, and must neither hold a slot of its owner's cap nor stop its own next attempt (issue 33, item 1).
 */
describe('an owner capped at 1 on a provider answering 500', () => {
  let t: TestApp;

  beforeAll(async () => {
    const catalogFile = writeCatalog((c) =>
      c.providers.push({
        name: 'sim-500',
        kind: 'simulated',
        model: 'sim-500',
        timeoutMs: 2000,
        hardTimeoutMs: 5000,
        maxAttempts: 3,
        simulate: { latencyMs: 20, outcome: 'error' },
      }),
    );
    t = await startTestApp({ role: 'all', catalogFile, workerPollMs: 50, reconcileIntervalMs: 200 });
  });
  afterAll(() => t.close());

  it('retries both jobs to the end of their attempts, one call at a time: neither stays running nor pending', async () => {
    const admin = await t.key('platform', ['owners:write', 'ops:read']);
    const owner = await t.key('team-x', ['jobs:write', 'jobs:read']);
    const set = await t.http().put('/v1/ops/owners/team-x').set(bearer(admin)).send({ weight: 1, maxConcurrency: 1 });
    expect(set.status).toBe(200);
    const ids: string[] = [];
    for (const key of ['first', 'second']) {
      const res = await t
        .http()
        .post('/v1/jobs')
        .set(bearer(owner))
        .set('Idempotency-Key', key)
        .send({ operation: 'summarize', input: { text: key }, providers: ['sim-500'] });
      expect(res.status).toBe(201);
      ids.push(res.body.id);
    }
    const jobs = await waitFor(
      () =>
        t.dataSource.query(
          `SELECT j.status, (SELECT count(*)::int FROM attempts a WHERE a.job_id = j.id AND a.status = 'failed') AS failed
             FROM jobs j WHERE j.id = ANY($1) ORDER BY j.created_at`,
          [ids],
        ),
      (rows: Array<{ status: string }>) => rows.every((r) => r.status === 'failed'),
      20_000,
    );
    expect(jobs).toEqual([
      { status: 'failed', failed: 3 },
      { status: 'failed', failed: 3 },
    ]);
    // No two of the owner's calls overlapped: each attempt marked running (right before its call) after the one
    // before had been settled (after its answer). Not claimed_at: a claim's transaction may begin just before the
    // settlement it then sees.
    const overlaps = await t.dataSource.query(
      `SELECT count(*)::int AS n FROM attempts a JOIN attempts b ON a.id < b.id
        WHERE a.job_id = ANY($1) AND b.job_id = ANY($1)
          AND a.started_at < b.finished_at AND b.started_at < a.finished_at`,
      [ids],
    );
    expect(overlaps[0].n).toBe(0);
  }, 30_000);
});
