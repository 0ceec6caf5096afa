import { bearer, startTestApp, type TestApp } from './helpers/app.js';
import { writeCatalog } from './helpers/catalog.js';
import { follow } from './helpers/sse.js';

const items = (prefix: string, n: number) =>
  Array.from({ length: n }, (_, i) => ({
    key: `${prefix}-${i}`,
    operation: 'summarize',
    input: { text: `${prefix} ${i}` },
  }));

interface BatchData {
  id: string;
  status: string;
  counts: Record<string, number>;
}

/** GET /v1/batches/:id/events (issue 27 with batches): a batch's progress, live, resumable, then batch.completed. */
describe("a batch's live progress (GET /v1/batches/:id/events, Accept: text/event-stream)", () => {
  let t: TestApp;
  let key: string;

  beforeAll(async () => {
    // Jobs that take a while, one worker slot at a time: the batch's jobs end one by one while the stream is open.
    const catalogFile = writeCatalog((c) => {
      c.providers.push({
        name: 'sim-steady',
        kind: 'simulated',
        model: 'sim-s',
        timeoutMs: 5000,
        simulate: { latencyMs: 250, outcome: 'success' },
      });
      const summarize = c.operations.find((o: { name: string }) => o.name === 'summarize');
      summarize.providers = ['sim-steady'];
    });
    t = await startTestApp({
      role: 'all',
      catalogFile,
      workerPollMs: 20,
      workerConcurrency: 2,
      streamHeartbeatMs: 200,
    });
    key = await t.key('owner-batch-stream');
  }, 60_000);

  afterAll(async () => {
    await t?.close();
  });

  const post = (batchKey: string, n: number) =>
    t
      .http()
      .post('/v1/batches')
      .set(bearer(key))
      .set('Idempotency-Key', batchKey)
      .send({ items: items(batchKey, n) });

  it('sends progress as jobs end, each id once and growing, then batch.completed, then stops; resumes after an id', async () => {
    const created = await post('live', 8);
    expect(created.status).toBe(201);
    const batchId = created.body.id as string;
    const follower = follow(`${t.baseUrl}/v1/batches/${batchId}/events`, key);
    await follower.over;
    follower.close();

    const ids = follower.messages.map((m) => Number(m.id));
    expect(ids).toEqual([...new Set(ids)].sort((a, b) => a - b));
    const last = follower.messages.at(-1)!;
    // Ids (issue 33 item 10b): progress is terminal members + 1, batch.completed members + 2.
    expect(last).toMatchObject({ id: '10', event: 'batch.completed' });
    expect((last.data as unknown as BatchData).counts).toMatchObject({ succeeded: 8, pending: 0, running: 0 });
    const progress = follower.messages.filter((m) => m.event === 'batch.progress');
    // Live, not one read at the end: several jobs ended while the stream was open.
    expect(progress.length).toBeGreaterThanOrEqual(3);
    expect(progress.at(-1)).toMatchObject({ id: '9' });
    for (const m of progress) expect((m.data as unknown as BatchData).counts.succeeded).toBe(Number(m.id) - 1);

    // Resumed after a progress id: only what follows it.
    const resumed = follow(`${t.baseUrl}/v1/batches/${batchId}/events`, key, { lastEventId: '3' });
    await resumed.over;
    resumed.close();
    expect(resumed.messages.map((m) => [m.id, m.event])).toEqual([
      ['9', 'batch.progress'],
      ['10', 'batch.completed'],
    ]);
    // After its last message the stream is over: 204, nothing sent.
    const done = await t
      .http()
      .get(`/v1/batches/${batchId}/events`)
      .set(bearer(key))
      .set('Accept', 'text/event-stream')
      .set('Last-Event-ID', '10');
    expect(done.status).toBe(204);
  }, 60_000);

  it('answers JSON without the stream, 404 for another owner, and 400 for a bad Last-Event-ID', async () => {
    const created = await post('walls', 1);
    const batchId = created.body.id as string;
    const json = await t.http().get(`/v1/batches/${batchId}/events`).set(bearer(key));
    expect(json.status).toBe(200);
    expect(json.body).toMatchObject({ id: batchId, itemCount: 1 });
    const stranger = await t.key('owner-stranger', ['jobs:read']);
    const hidden = await t
      .http()
      .get(`/v1/batches/${batchId}/events`)
      .set(bearer(stranger))
      .set('Accept', 'text/event-stream');
    expect(hidden.status).toBe(404);
    const bad = await t
      .http()
      .get(`/v1/batches/${batchId}/events?lastEventId=x`)
      .set(bearer(key))
      .set('Accept', 'text/event-stream');
    expect(bad.status).toBe(400);
  });
});
