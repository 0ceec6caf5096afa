import { bearer, startTestApp, type TestApp } from './helpers/app.js';
import { provider, writeCatalog } from './helpers/catalog.js';

type Item = { key: string; operation: string; input: Record<string, unknown>; providers?: string[] };

const items = (prefix: string, n: number, text = (i: number) => `document ${prefix} ${i}`): Item[] =>
  Array.from({ length: n }, (_, i) => ({ key: `${prefix}-${i}`, operation: 'summarize', input: { text: text(i) } }));

async function counts(t: TestApp): Promise<{ batches: number; items: number; jobs: number; events: number }> {
  const [row] = await t.dataSource.query(`SELECT (SELECT count(*)::int FROM batches) AS batches,
    (SELECT count(*)::int FROM batch_items) AS items, (SELECT count(*)::int FROM jobs) AS jobs,
    (SELECT count(*)::int FROM job_events) AS events`);
  return row;
}

describe('batches: thousands of intents in one request, each still exactly one job (I10)', () => {
  let t: TestApp;
  let key: string;

  beforeAll(async () => {
    // Twenty concurrent batches of one owner: I10's race, past the admission bound (test/batches-admission).
    t = await startTestApp({ maxConcurrentBatches: 32, maxConcurrentBatchesPerOwner: 32 });
  }, 60_000);
  afterAll(async () => {
    await t.close();
  });
  beforeEach(async () => {
    await t.truncate();
    key = await t.key('owner-batches');
  });

  const post = (batchKey: string, body: unknown, apiKey = key) =>
    t
      .http()
      .post('/v1/batches')
      .set(bearer(apiKey))
      .set('Idempotency-Key', batchKey)
      .send(body as object);

  it('gives 20 concurrent identical batches one batch and one job per item key', async () => {
    const body = { items: items('c', 200), metadata: { source: 'race' } };
    const answers = await Promise.all(Array.from({ length: 20 }, () => post('batch-race', body)));
    expect(answers.map((a) => a.status).sort()).toEqual([...Array(19).fill(200), 201]);
    const ids = new Set(answers.map((a) => a.body.id));
    expect(ids.size).toBe(1);
    const created = answers.find((a) => a.status === 201)!;
    expect(created.headers.location).toBe(`/v1/batches/${created.body.id}`);
    expect(created.body.items).toHaveLength(200);
    expect(created.body.items.every((i: { outcome: string }) => i.outcome === 'created')).toBe(true);
    for (const replay of answers.filter((a) => a.status === 200)) {
      expect(replay.headers['idempotent-replayed']).toBe('true');
      expect(replay.body.items).toEqual(created.body.items);
    }
    expect(await counts(t)).toEqual({ batches: 1, items: 200, jobs: 200, events: 200 });
    const [dupes] = await t.dataSource.query(
      `SELECT count(*)::int AS n FROM (
         SELECT idempotency_key FROM jobs GROUP BY owner_id, idempotency_key HAVING count(*) > 1) d`,
    );
    expect(dupes.n).toBe(0);
    const shape = { status: 'running', itemCount: 200, liveJobs: 200, metadata: { source: 'race' } };
    expect(created.body).toMatchObject(shape);
    const none = { running: 0, unknown: 0, succeeded: 0, failed: 0, cancelled: 0, conflict: 0 };
    expect(created.body.counts).toEqual({ pending: 200, ...none });
  }, 60_000);

  it('answers 409 to the same batch key with another body, and writes nothing', async () => {
    expect((await post('k409', { items: items('a', 3) })).status).toBe(201);
    const before = await counts(t);
    const other = await post('k409', { items: items('a', 3, (i) => `changed ${i}`) });
    expect(other.status).toBe(409);
    expect(other.body.code).toBe('idempotency_key_reused');
    // The metadata is part of the batch's intent too.
    expect((await post('k409', { items: items('a', 3), metadata: { x: 1 } })).status).toBe(409);
    // The order of the items is part of it.
    expect((await post('k409', { items: items('a', 3).reverse() })).status).toBe(409);
    expect(await counts(t)).toEqual(before);
  });

  it('lets two batches whose items share keys and intents share those jobs', async () => {
    const first = await post('share-1', { items: items('s', 10) });
    expect(first.status).toBe(201);
    const second = await post('share-2', { items: [...items('s', 10).slice(5), ...items('t', 5)] });
    expect(second.status).toBe(201);
    const byKey = new Map(first.body.items.map((i: { key: string; jobId: string }) => [i.key, i.jobId]));
    for (const item of second.body.items.slice(0, 5)) {
      expect(item.outcome).toBe('replayed');
      expect(item.jobId).toBe(byKey.get(item.key));
    }
    expect(second.body.items.slice(5).every((i: { outcome: string }) => i.outcome === 'created')).toBe(true);
    expect(await counts(t)).toMatchObject({ batches: 2, items: 20, jobs: 15 });
    const [shared] = await t.dataSource.query(
      `SELECT count(*)::int AS n FROM (SELECT job_id FROM batch_items GROUP BY job_id HAVING count(*) = 2) s`,
    );
    expect(shared.n).toBe(5);
    // A job is one job: a single create under the same key and intent is that job.
    const single = await t
      .http()
      .post('/v1/jobs')
      .set(bearer(key))
      .set('Idempotency-Key', 's-7')
      .send({ operation: 'summarize', input: { text: 'document s 7' } });
    expect(single.status).toBe(200);
    expect(single.body.id).toBe(byKey.get('s-7'));
  });

  it("leaves a conflicting item's job untouched and creates the rest", async () => {
    const existing = await t
      .http()
      .post('/v1/jobs')
      .set(bearer(key))
      .set('Idempotency-Key', 'x-1')
      .send({ operation: 'summarize', input: { text: 'the original intent' } });
    expect(existing.status).toBe(201);
    const [before] = await t.dataSource.query('SELECT * FROM jobs WHERE id = $1', [existing.body.id]);
    const res = await post('conflict', { items: items('x', 4) });
    expect(res.status).toBe(201);
    const outcomes = res.body.items.map((i: { outcome: string }) => i.outcome);
    expect(outcomes).toEqual(['created', 'conflict', 'created', 'created']);
    const [after] = await t.dataSource.query('SELECT * FROM jobs WHERE id = $1', [existing.body.id]);
    expect(after).toEqual(before);
    expect(res.body.counts).toMatchObject({ pending: 3, conflict: 1 });
    expect(res.body.liveJobs).toBe(3);
  });

  it('answers a conflicting item with idempotency_key_reused and the job its key names, in replays and pages', async () => {
    const existing = await t
      .http()
      .post('/v1/jobs')
      .set(bearer(key))
      .set('Idempotency-Key', 'y-2')
      .send({ operation: 'summarize', input: { text: 'the original intent' } });
    expect(existing.status).toBe(201);
    const res = await post('conflict-code', { items: items('y', 4) });
    expect(res.status).toBe(201);
    const conflict = { index: 2, key: 'y-2', outcome: 'conflict', code: 'idempotency_key_reused' };
    expect(res.body.items[2]).toEqual({ ...conflict, jobId: existing.body.id });
    expect(res.body.items[0]).toEqual({ index: 0, key: 'y-0', outcome: 'created', jobId: expect.any(String) });
    const replay = await post('conflict-code', { items: items('y', 4) });
    expect(replay.status).toBe(200);
    expect(replay.body.items).toEqual(res.body.items);
    const page = await t.http().get(`/v1/batches/${res.body.id}/jobs`).set(bearer(key));
    expect(page.body.items[2]).toEqual({
      ...conflict,
      jobId: existing.body.id,
      status: null,
      version: null,
      completedAt: null,
    });
    // The named job is still no member of the batch: not counted, and the batch completes without it.
    expect(res.body.counts).toMatchObject({ pending: 3, conflict: 1 });
    const cancelled = await t.http().post(`/v1/batches/${res.body.id}/cancel`).set(bearer(key));
    expect(cancelled.body).toMatchObject({ status: 'completed', liveJobs: 0, counts: { cancelled: 3, pending: 0 } });
    const [named] = await t.dataSource.query('SELECT status FROM jobs WHERE id = $1', [existing.body.id]);
    expect(named.status).toBe('pending');
  });

  it('gives each bad item the code a single create gives, and the batch the code its errors share', async () => {
    const unknownOperation = await post('codes-op', {
      items: [...items('o', 1), { key: 'o-1', operation: 'nope', input: { text: 'a' } }],
    });
    expect(unknownOperation.status).toBe(422);
    expect(unknownOperation.body.code).toBe('unknown_operation');
    expect(unknownOperation.body.errors).toEqual([
      { field: 'items[1].operation', message: 'is not an operation of the catalog', code: 'unknown_operation' },
    ]);
    const single = await t
      .http()
      .post('/v1/jobs')
      .set(bearer(key))
      .set('Idempotency-Key', 'codes-single')
      .send({ operation: 'nope', input: { text: 'a' } });
    expect(single.body.code).toBe(unknownOperation.body.code);

    const unknownProvider = await post('codes-provider', {
      items: [{ key: 'p-0', operation: 'summarize', input: { text: 'a' }, providers: ['sim-primary', 'sim-none'] }],
    });
    expect(unknownProvider.status).toBe(422);
    expect(unknownProvider.body.code).toBe('unknown_provider');
    expect(unknownProvider.body.errors).toEqual([
      { field: 'items[0].providers[1]', message: 'is not a provider of the catalog', code: 'unknown_provider' },
    ]);

    const mixed = await post('codes-mixed', {
      items: [
        { key: 'm-0', operation: 'nope', input: { text: 'a' } },
        { key: 'm-1', operation: 'summarize', input: {} },
      ],
    });
    expect(mixed.status).toBe(422);
    expect(mixed.body.code).toBe('validation_failed');
    expect(mixed.body.errors.map((e: { field: string; code: string }) => [e.field, e.code])).toEqual([
      ['items[0].operation', 'unknown_operation'],
      ['items[1].input.text', 'validation_failed'],
    ]);
    expect(await counts(t)).toEqual({ batches: 0, items: 0, jobs: 0, events: 0 });
  });

  it('refuses 10,001 items, a repeated key and a NUL in one item, naming the index, and writes nothing', async () => {
    const tooMany = await post('big', { items: items('b', 10_001, () => 'x') });
    expect(tooMany.status).toBe(422);
    expect(tooMany.headers['content-type']).toMatch(/application\/problem\+json/);
    expect(tooMany.body.errors).toEqual([
      { field: 'items[10000]', message: expect.stringMatching(/limit of 10000/), code: 'validation_failed' },
    ]);

    const repeated = items('r', 5);
    repeated[3].key = 'r-1';
    const rep = await post('rep', { items: repeated });
    expect(rep.status).toBe(422);
    expect(rep.body.errors).toEqual([
      { field: 'items[3].key', message: expect.stringMatching(/items\[1\]/), code: 'validation_failed' },
    ]);

    const nul = items('n', 5);
    nul[2].input.text = 'bad \u0000 text';
    const withNul = await post('nul', { items: nul });
    expect(withNul.status).toBe(422);
    // Refused before the batch's own validation (what PostgreSQL cannot store, on every body): no per-item code.
    expect(withNul.body.errors).toEqual([{ field: 'items[2].input.text', message: expect.stringMatching(/NUL/) }]);

    const bad = await post('bad', {
      items: [
        ...items('v', 2),
        { key: 'v-2', operation: 'nope', input: { text: 'a' } },
        { key: 'v 3', operation: 'summarize', input: {} },
        { key: 'v-4', operation: 'summarize', input: { text: 'a' }, providers: ['sim-nonexistent'], extra: 1 },
      ],
      priority: 5000,
    });
    expect(bad.status).toBe(422);
    expect(bad.body.errors.map((e: { field: string }) => e.field).sort()).toEqual(
      [
        'items[2].operation',
        'items[3].key',
        'items[3].input.text',
        'items[4].extra',
        'items[4].providers[0]',
        'priority',
      ].sort(),
    );
    expect(await counts(t)).toEqual({ batches: 0, items: 0, jobs: 0, events: 0 });
    const missing = await t
      .http()
      .post('/v1/batches')
      .set(bearer(key))
      .send({ items: items('m', 1) });
    expect(missing.status).toBe(400);
    expect(missing.body.code).toBe('idempotency_key_missing');
  }, 30_000);

  it('takes a 10,000-item batch in one request and replays it', async () => {
    const body = { items: items('big', 10_000) };
    const created = await post('ten-thousand', body);
    expect(created.status).toBe(201);
    expect(created.body.items).toHaveLength(10_000);
    expect(created.body.items[9_999]).toMatchObject({ index: 9_999, key: 'big-9999', outcome: 'created' });
    expect(await counts(t)).toEqual({ batches: 1, items: 10_000, jobs: 10_000, events: 10_000 });
    const replay = await post('ten-thousand', body);
    expect(replay.status).toBe(200);
    expect(replay.body.items).toEqual(created.body.items);
    // Under a new batch key, the same items are the same jobs.
    const again = await post('ten-thousand-bis', body);
    expect(again.status).toBe(201);
    const same = (i: { outcome: string; jobId: string }, n: number) =>
      i.outcome === 'replayed' && i.jobId === created.body.items[n].jobId;
    expect(again.body.items.every(same)).toBe(true);
    expect(await counts(t)).toMatchObject({ batches: 2, items: 20_000, jobs: 10_000 });
  }, 60_000);

  it('reads a batch, pages its jobs, lists batches, walls owners off and lets ops:read read any', async () => {
    const created = await post('read', { items: items('p', 25), priority: 7 });
    expect(created.status).toBe(201);
    const id = created.body.id;
    const got = await t.http().get(`/v1/batches/${id}`).set(bearer(key));
    expect(got.status).toBe(200);
    expect(got.body).toMatchObject({ id, priority: 7, itemCount: 25, status: 'running', completedAt: null });
    const seen: number[] = [];
    let cursor: string | undefined;
    do {
      const query = { limit: 10, ...(cursor ? { cursor } : {}) };
      const page = await t.http().get(`/v1/batches/${id}/jobs`).query(query).set(bearer(key));
      expect(page.status).toBe(200);
      seen.push(...page.body.items.map((i: { index: number }) => i.index));
      cursor = page.body.nextCursor ?? undefined;
    } while (cursor);
    expect(seen).toEqual(Array.from({ length: 25 }, (_, i) => i));
    const pending = await t.http().get(`/v1/batches/${id}/jobs`).query({ status: 'succeeded' }).set(bearer(key));
    expect(pending.body.items).toEqual([]);

    await post('read-2', { items: items('q', 1) });
    const list = await t.http().get('/v1/batches').query({ limit: 1 }).set(bearer(key));
    expect(list.status).toBe(200);
    expect(list.body.items).toHaveLength(1);
    const next = await t.http().get('/v1/batches').query({ limit: 1, cursor: list.body.nextCursor }).set(bearer(key));
    expect(next.body.items[0].id).toBe(id);

    const stranger = await t.key('owner-stranger', ['jobs:read', 'jobs:write']);
    expect((await t.http().get(`/v1/batches/${id}`).set(bearer(stranger))).status).toBe(404);
    expect((await t.http().get(`/v1/batches/${id}/jobs`).set(bearer(stranger))).status).toBe(404);
    expect((await t.http().post(`/v1/batches/${id}/cancel`).set(bearer(stranger))).status).toBe(404);
    expect((await t.http().get('/v1/batches').set(bearer(stranger))).body.items).toEqual([]);
    const operator = await t.key('owner-ops', ['ops:read']);
    expect((await t.http().get(`/v1/batches/${id}`).set(bearer(operator))).body.id).toBe(id);
    expect((await t.http().get(`/v1/batches/${id}/jobs`).set(bearer(operator))).body.items).toHaveLength(20);
  });

  it('cancels only the jobs the batch created, never one it replayed', async () => {
    const outside = await t
      .http()
      .post('/v1/jobs')
      .set(bearer(key))
      .set('Idempotency-Key', 'own-1')
      .send({ operation: 'summarize', input: { text: 'document own 1' } });
    expect(outside.status).toBe(201);
    const first = await post('own-a', { items: items('own', 3) });
    expect(first.body.items.map((i: { outcome: string }) => i.outcome)).toEqual(['created', 'replayed', 'created']);
    // A second batch replays all three: the first batch's jobs and the single create's, none its own.
    const second = await post('own-b', { items: [...items('own', 3), ...items('new', 1)] });
    expect(second.body.items.map((i: { outcome: string }) => i.outcome)).toEqual([
      'replayed',
      'replayed',
      'replayed',
      'created',
    ]);
    const res = await t.http().post(`/v1/batches/${second.body.id}/cancel`).set(bearer(key));
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ status: 'running', liveJobs: 3, counts: { cancelled: 1, pending: 3 } });
    const rows = await t.dataSource.query(`SELECT idempotency_key AS key, status FROM jobs ORDER BY idempotency_key`);
    expect(rows).toEqual([
      { key: 'new-0', status: 'cancelled' },
      { key: 'own-0', status: 'pending' },
      { key: 'own-1', status: 'pending' },
      { key: 'own-2', status: 'pending' },
    ]);
    // The first batch's cancel takes its own two, and still not the single create's job it replayed.
    const own = await t.http().post(`/v1/batches/${first.body.id}/cancel`).set(bearer(key));
    expect(own.body).toMatchObject({ liveJobs: 1, counts: { cancelled: 2, pending: 1 } });
    const [single] = await t.dataSource.query('SELECT status FROM jobs WHERE id = $1', [outside.body.id]);
    expect(single.status).toBe('pending');
  });

  it('cancels every live job of a batch, each a fence, and completes the batch', async () => {
    const created = await post('cancel', { items: items('z', 30) });
    const id = created.body.id;
    const res = await t.http().post(`/v1/batches/${id}/cancel`).set(bearer(key));
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ status: 'completed', liveJobs: 0 });
    expect(res.body.counts).toMatchObject({ cancelled: 30, pending: 0 });
    const rows = await t.dataSource.query(`SELECT status, version FROM jobs`);
    const fenced = (r: { status: string; version: number }) => r.status === 'cancelled' && r.version === 1;
    expect(rows.every(fenced)).toBe(true);
    const again = await t.http().post(`/v1/batches/${id}/cancel`).set(bearer(key));
    expect(again.status).toBe(200);
  });
});

describe('batches under a budget: the worst case reserved whole, or the batch refused whole', () => {
  it('admits a batch that fits, refuses one that does not (429, nothing written), replays existing jobs', async () => {
    const pricing = { inputPerMTok: 1000, outputPerMTok: 2000, currency: 'USD' };
    const catalogFile = writeCatalog((c) => (provider(c, 'sim-primary').pricing = pricing));
    const t = await startTestApp({ role: 'api', catalogFile });
    try {
      const key = await t.key('owner-batch-budget');
      const post = (batchKey: string, batchItems: Item[]) =>
        t.http().post('/v1/batches').set(bearer(key)).set('Idempotency-Key', batchKey).send({ items: batchItems });
      const same = (prefix: string, n: number) => items(prefix, n, () => 'the same text for the same worst case');
      // One job's worst case, as a single create reserves it.
      const budget = (monthlyLimit: number) =>
        t.http().put('/v1/budget').set(bearer(key)).send({ monthlyLimit, currency: 'USD' });
      expect((await budget(1000)).status).toBe(200);
      const single = await t
        .http()
        .post('/v1/jobs')
        .set(bearer(key))
        .set('Idempotency-Key', 'one')
        .send({ operation: 'summarize', input: same('one', 1)[0].input });
      expect(single.status).toBe(201);
      const worst = (await t.http().get('/v1/budget').set(bearer(key))).body.reserved as number;
      expect(worst).toBeGreaterThan(0);
      expect((await budget(worst * 3.5)).status).toBe(200);

      // Held: 1 worst case; ahead of the last new job: 2; below 3.5.
      expect((await post('fits', same('fit', 2))).status).toBe(201);
      const before = await counts(t);
      // Held: 3; ahead of the last: 5.
      const refused = await post('too-big', same('big', 3));
      expect(refused.status).toBe(429);
      expect(refused.body.code).toBe('budget_exceeded');
      expect(Number(refused.headers['retry-after'])).toBeGreaterThan(0);
      expect(await counts(t)).toEqual(before);
      // Jobs that exist cost nothing more: a batch of them is admitted over the budget.
      const replayed = await post('again', same('fit', 2));
      expect(replayed.status).toBe(201);
      expect(replayed.body.items.map((i: { outcome: string }) => i.outcome)).toEqual(['replayed', 'replayed']);
      const status = (await t.http().get('/v1/budget').set(bearer(key))).body;
      expect(status.reserved).toBeCloseTo(worst * 3, 8);
    } finally {
      await t.close();
    }
  }, 60_000);
});

describe("a batch's write is bounded by DB_QUERY_TIMEOUT_MS, not the request's shorter bound", () => {
  it('commits a batch whose INSERT waits longer than DB_REQUEST_TIMEOUT_MS on another transaction', async () => {
    const t = await startTestApp({ dbRequestTimeoutMs: 500 });
    const blocker = t.dataSource.createQueryRunner();
    try {
      const key = await t.key('owner-batch-bound');
      // Another transaction holds one of the batch's keys: the batch's INSERT waits for it (ON CONFLICT).
      await blocker.connect();
      await blocker.startTransaction();
      await blocker.query(
        `INSERT INTO jobs (owner_id, idempotency_key, fingerprint, operation, input, providers)
         VALUES ('owner-batch-bound', 'bound-3', repeat('f', 64), 'summarize', '{"text":"x"}', '{sim-primary}')`,
      );
      // supertest sends on then(): start the request now, and let it wait past the request bound.
      const request = t.http().post('/v1/batches').set(bearer(key)).set('Idempotency-Key', 'bound');
      const answer = request.send({ items: items('bound', 5) }).then((res) => res);
      await new Promise((resolve) => setTimeout(resolve, 1500));
      await blocker.commitTransaction();
      const res = await answer;
      expect(res.status).toBe(201);
      const outcomes = res.body.items.map((i: { outcome: string }) => i.outcome);
      expect(outcomes).toEqual(['created', 'created', 'created', 'conflict', 'created']);
    } finally {
      await blocker.release();
      await t.close();
    }
  }, 60_000);
});
