import { bearer, startTestApp, type TestApp } from './helpers/app.js';

const body = { operation: 'summarize', input: { text: 'The quick brown fox.' } };

describe('POST /v1/jobs: one job per intent at the door', () => {
  let t: TestApp;
  let key: string;

  beforeAll(async () => {
    t = await startTestApp();
  });
  afterAll(() => t.close());
  beforeEach(async () => {
    await t.truncate();
    key = await t.key('owner-a');
  });

  const post = (idempotencyKey: string, payload: unknown = body, apiKey = key) =>
    t
      .http()
      .post('/v1/jobs')
      .set(bearer(apiKey))
      .set('Idempotency-Key', idempotencyKey)
      .send(payload as object);

  it('returns the same job id to 50 concurrent requests with one key, one 201 and 49 replays', async () => {
    const responses = await Promise.all(Array.from({ length: 50 }, () => post('double-click')));
    const ids = new Set(responses.map((r) => r.body.id));
    expect(ids.size).toBe(1);
    expect(responses.filter((r) => r.status === 201)).toHaveLength(1);
    const replays = responses.filter((r) => r.status === 200);
    expect(replays).toHaveLength(49);
    for (const r of replays) expect(r.headers['idempotent-replayed']).toBe('true');
    const rows = await t.dataSource.query('SELECT count(*)::int AS n FROM jobs');
    expect(rows[0].n).toBe(1);
  });

  it('answers 201 with Location for a new key and the job body', async () => {
    const res = await post('first');
    expect(res.status).toBe(201);
    expect(res.headers.location).toBe(`/v1/jobs/${res.body.id}`);
    expect(res.headers['idempotent-replayed']).toBeUndefined();
    expect(res.body).toMatchObject({
      status: 'pending',
      operation: 'summarize',
      input: body.input,
      providers: ['sim-primary', 'sim-fallback'],
      idempotencyKey: 'first',
      version: 0,
      priority: 0,
      result: null,
      completedBy: null,
      attempts: [],
    });
  });

  it('refuses the same key with another body with 409 and leaves the stored job byte-for-byte unchanged', async () => {
    const created = await post('k1');
    const before = await t.dataSource.query('SELECT row_to_json(j)::text AS row FROM jobs j');
    const res = await post('k1', { operation: 'summarize', input: { text: 'Something else.' } });
    expect(res.status).toBe(409);
    expect(res.headers['content-type']).toMatch(/^application\/problem\+json/);
    expect(res.body).toMatchObject({ code: 'idempotency_key_reused', status: 409 });
    expect(res.body.id).toBeUndefined();
    expect(JSON.stringify(res.body)).not.toContain(created.body.id);
    const after = await t.dataSource.query('SELECT row_to_json(j)::text AS row FROM jobs j');
    expect(after).toEqual(before);
  });

  it('treats a changed provider chain as another intent: 409', async () => {
    await post('k2');
    const res = await post('k2', { ...body, providers: ['sim-fallback'] });
    expect(res.status).toBe(409);
    expect(res.body.code).toBe('idempotency_key_reused');
  });

  it('replays the same body with its keys in another order instead of refusing it', async () => {
    const first = await post('k3', { operation: 'summarize', input: { text: 'abc' }, providers: ['sim-primary'] });
    const reordered = JSON.parse('{"providers":["sim-primary"],"input":{"text":"abc"},"operation":"summarize"}');
    const res = await post('k3', reordered);
    expect(res.status).toBe(200);
    expect(res.headers['idempotent-replayed']).toBe('true');
    expect(res.body.id).toBe(first.body.id);
  });

  it('stores a priority as given, and a replay with another priority answers the job as created', async () => {
    const created = await post('prio', { ...body, priority: 7 });
    expect(created.status).toBe(201);
    expect(created.body.priority).toBe(7);
    const replay = await post('prio', { ...body, priority: -3 });
    expect(replay.status).toBe(200);
    expect(replay.headers['idempotent-replayed']).toBe('true');
    expect(replay.body).toMatchObject({ id: created.body.id, priority: 7 });
    const rows = await t.dataSource.query('SELECT priority FROM jobs');
    expect(rows).toEqual([{ priority: 7 }]);
  });

  it('refuses a priority outside -1000..1000 or not an integer, naming the field, and writes nothing', async () => {
    for (const priority of [1001, -1001, 1.5, '3']) {
      const res = await post(`bad-prio-${String(priority)}`, { ...body, priority });
      expect(res.status).toBe(400);
      expect(res.body.code).toBe('validation_failed');
      expect(JSON.stringify(res.body)).toContain('priority');
    }
    const rows = await t.dataSource.query('SELECT count(*)::int AS n FROM jobs');
    expect(rows[0].n).toBe(0);
  });

  it('gives two owners using the same key two jobs, each invisible to the other', async () => {
    const keyB = await t.key('owner-b');
    const a = await post('shared', body, key);
    const b = await post('shared', body, keyB);
    expect(a.status).toBe(201);
    expect(b.status).toBe(201);
    expect(a.body.id).not.toBe(b.body.id);

    const crossA = await t.http().get(`/v1/jobs/${b.body.id}`).set(bearer(key));
    expect(crossA.status).toBe(404);
    expect(crossA.body.code).toBe('not_found');
    const crossB = await t.http().get(`/v1/jobs/${a.body.id}`).set(bearer(keyB));
    expect(crossB.status).toBe(404);
    const cancelCross = await t.http().post(`/v1/jobs/${a.body.id}/cancel`).set(bearer(keyB));
    expect(cancelCross.status).toBe(404);

    const listA = await t.http().get('/v1/jobs').set(bearer(key));
    expect(listA.body.items.map((j: { id: string }) => j.id)).toEqual([a.body.id]);
    const listB = await t.http().get('/v1/jobs').set(bearer(keyB));
    expect(listB.body.items.map((j: { id: string }) => j.id)).toEqual([b.body.id]);
  });

  it('reads its own job back with GET', async () => {
    const created = await post('read-me');
    const res = await t.http().get(`/v1/jobs/${created.body.id}`).set(bearer(key));
    expect(res.status).toBe(200);
    expect(res.body).toEqual(created.body);
    expect(res.headers['preference-applied']).toBeUndefined();
  });

  it('answers GET with Prefer: wait with Preference-Applied, the wait it honoured', async () => {
    const created = await post('wait-read');
    const res = await t.http().get(`/v1/jobs/${created.body.id}`).set(bearer(key)).set('Prefer', 'wait=1');
    expect(res.status).toBe(200);
    expect(res.headers['preference-applied']).toBe('wait=1');
  });
});

describe('GET /v1/jobs: keyset pagination', () => {
  let t: TestApp;
  let key: string;

  beforeAll(async () => {
    t = await startTestApp();
    key = await t.key('lister');
  });
  afterAll(() => t.close());

  it('walks every job exactly once, newest first, and filters by status', async () => {
    const created: string[] = [];
    for (let i = 0; i < 7; i++) {
      const res = await t
        .http()
        .post('/v1/jobs')
        .set(bearer(key))
        .set('Idempotency-Key', `page-${i}`)
        .send({ operation: 'summarize', input: { text: `t${i}` } });
      created.push(res.body.id);
    }
    await t.http().post(`/v1/jobs/${created[2]}/cancel`).set(bearer(key)).expect(200);

    const seen: string[] = [];
    let cursor: string | null = null;
    do {
      const res: { status: number; body: { items: Array<{ id: string }>; nextCursor: string | null } } = await t
        .http()
        .get('/v1/jobs')
        .query(cursor ? { limit: 3, cursor } : { limit: 3 })
        .set(bearer(key));
      expect(res.status).toBe(200);
      expect(res.body.items.length).toBeLessThanOrEqual(3);
      seen.push(...res.body.items.map((j) => j.id));
      cursor = res.body.nextCursor;
    } while (cursor);
    expect(seen).toEqual([...created].reverse());

    const cancelled = await t.http().get('/v1/jobs?status=cancelled').set(bearer(key));
    expect(cancelled.body.items.map((j: { id: string }) => j.id)).toEqual([created[2]]);
  });

  it('refuses a forged cursor, a bad limit and an unknown status with 400', async () => {
    for (const query of ['cursor=bm90LWEtdXVpZA', 'limit=0', 'limit=101', 'limit=abc', 'status=done', 'other=1']) {
      const res = await t.http().get(`/v1/jobs?${query}`).set(bearer(key));
      expect({ query, status: res.status, code: res.body.code }).toEqual({
        query,
        status: 400,
        code: 'validation_failed',
      });
    }
  });
});
