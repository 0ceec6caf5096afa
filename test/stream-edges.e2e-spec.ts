import { postJob } from './factories/index.js';
import { bearer, startTestApp, type TestApp } from './helpers/app.js';

/** Issue 33: the edges of the live streams (job timeline and batch progress, SSE and JSON forms). */
describe('stream edges: Last-Event-ID and cursors are checked against the document (issue 33 item 4)', () => {
  let t: TestApp;
  let key: string;
  let jobId: string;
  let batchId: string;

  beforeAll(async () => {
    t = await startTestApp({ role: 'api', streamHeartbeatMs: 200 });
    key = await t.key('owner-stream-edges');
    jobId = (await postJob(t, key)).id;
    const batch = await t
      .http()
      .post('/v1/batches')
      .set(bearer(key))
      .set('Idempotency-Key', 'edges')
      .send({ items: [{ key: 'edges-0', operation: 'summarize', input: { text: 'x' } }] });
    expect(batch.status).toBe(201);
    batchId = batch.body.id as string;
  }, 60_000);

  afterAll(async () => {
    await t?.close();
  });

  const BIGINT_MAX = '9223372036854775807';
  const PAST_BIGINT = ['9999999999999999999', '9223372036854775808'];
  const streams = () => [`/v1/jobs/${jobId}/events`, `/v1/batches/${batchId}/events`];

  const expectField = (res: { status: number; body: Record<string, unknown> }, field: string) => {
    expect(res.status).toBe(400);
    expect(res.body).toMatchObject({ code: 'validation_failed' });
    expect((res.body.errors as Array<{ field: string }>).map((e) => e.field)).toContain(field);
  };

  it.each(['has space', ...PAST_BIGINT])(
    'refuses Last-Event-ID %j with 400 naming it, on the JSON form and on the stream of both streams',
    async (value) => {
      for (const path of streams()) {
        expectField(await t.http().get(path).set(bearer(key)).set('Last-Event-ID', value), 'Last-Event-ID');
        const stream = await t
          .http()
          .get(path)
          .set(bearer(key))
          .set('Accept', 'text/event-stream')
          .set('Last-Event-ID', value)
          .timeout(5000);
        expectField(stream, 'Last-Event-ID');
      }
    },
  );

  it.each(PAST_BIGINT)('refuses ?lastEventId=%s (in the pattern, past bigint) with 400 naming it', async (value) => {
    for (const path of streams()) {
      expectField(await t.http().get(`${path}?lastEventId=${value}`).set(bearer(key)), 'lastEventId');
      const stream = await t
        .http()
        .get(`${path}?lastEventId=${value}`)
        .set(bearer(key))
        .set('Accept', 'text/event-stream')
        .timeout(5000);
      expectField(stream, 'lastEventId');
    }
  });

  it.each(PAST_BIGINT)(
    "refuses the timeline's cursor naming event %s (past bigint) with 400, not 500",
    async (value) => {
      const cursor = Buffer.from(value, 'utf8').toString('base64url');
      expectField(await t.http().get(`/v1/jobs/${jobId}/events?cursor=${cursor}`).set(bearer(key)), 'cursor');
    },
  );

  it('still takes the largest id the document allows', async () => {
    for (const path of streams()) {
      expect((await t.http().get(path).set(bearer(key)).set('Last-Event-ID', BIGINT_MAX)).status).toBe(200);
    }
    const cursor = Buffer.from(BIGINT_MAX, 'utf8').toString('base64url');
    const page = await t.http().get(`/v1/jobs/${jobId}/events?cursor=${cursor}`).set(bearer(key));
    expect(page.status).toBe(200);
    expect(page.body.items).toEqual([]);
  });
});
