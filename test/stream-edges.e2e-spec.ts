import { get } from 'node:http';

import { BatchesRepository } from '../src/ledger/batches.repository.js';
import { RetentionRepository } from '../src/retention/retention.repository.js';
import { postJob } from './factories/index.js';
import { bearer, startTestApp, type TestApp } from './helpers/app.js';
import { writeCatalog } from './helpers/catalog.js';
import { follow, idsOf, readRaw } from './helpers/sse.js';
import { sleep, waitFor } from './helpers/wait.js';

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

describe("stream edges: a batch's stream ids (issue 33 items 6 and 10b)", () => {
  let t: TestApp;
  let key: string;

  beforeAll(async () => {
    // sim-primary ends its jobs at once; sim-slow keeps one job of a batch live for a few seconds.
    const catalogFile = writeCatalog((c) => {
      c.providers.push({
        name: 'sim-slow',
        kind: 'simulated',
        model: 'sim-slow',
        timeoutMs: 20_000,
        simulate: { latencyMs: 3000, outcome: 'success' },
      });
    });
    t = await startTestApp({
      role: 'all',
      catalogFile,
      workerPollMs: 20,
      streamHeartbeatMs: 200,
      jobRetentionDays: 1,
      retentionIntervalMs: 3_600_000, // the test purges itself
    });
    key = await t.key('owner-batch-ids');
  }, 60_000);

  afterAll(async () => {
    await t?.close();
  });

  const post = async (batchKey: string, providers: string[]) => {
    const items = providers.map((p, i) => ({
      key: `${batchKey}-${i}`,
      operation: 'summarize',
      input: { text: `${batchKey} ${i}` },
      providers: [p],
    }));
    const res = await t.http().post('/v1/batches').set(bearer(key)).set('Idempotency-Key', batchKey).send({ items });
    expect(res.status).toBe(201);
    return res.body.id as string;
  };
  const url = (batchId: string) => `${t.baseUrl}/v1/batches/${batchId}/events`;
  /** The stream's first message's id: where a client that read it stands. */
  const firstId = async (batchId: string) => {
    const raw = await readRaw(url(batchId), bearer(key), (text) => idsOf(text).length > 0);
    expect(raw.status).toBe(200);
    return idsOf(raw.text)[0];
  };

  it('resuming from the first message id (Last-Event-ID of the first message) does not resend it', async () => {
    const batchId = await post('first-id', ['sim-slow']);
    const first = await firstId(batchId);
    // The stream's ids follow the document's pattern and the first one is not the "from the start" id.
    expect(first).toMatch(/^[1-9]\d{0,18}$/);
    const resumed = follow(url(batchId), key, { lastEventId: first });
    await resumed.over;
    resumed.close();
    expect(resumed.messages.map((m) => m.id)).not.toContain(first);
    expect(resumed.messages.at(-1)?.event).toBe('batch.completed');
    for (const m of resumed.messages) expect(BigInt(m.id)).toBeGreaterThan(BigInt(first));
  }, 30_000);

  it('a purge of finished members does not take the ids back: a client holding one still gets batch.completed', async () => {
    const batchId = await post('purged', ['sim-primary', 'sim-primary', 'sim-slow']);
    await waitFor(
      async () => (await t.http().get(`/v1/batches/${batchId}`).set(bearer(key))).body.counts.succeeded,
      (n) => n === 2,
    );
    const held = await firstId(batchId);
    // Settled three days ago, past JOB_RETENTION_DAYS=1: the purge takes the two finished members.
    await t.dataSource.query(
      `UPDATE jobs SET completed_at = completed_at - interval '3 days'
        WHERE status = 'succeeded' AND id IN (SELECT job_id FROM batch_items WHERE batch_id = $1)`,
      [batchId],
    );
    expect((await t.app.get(RetentionRepository).purgeBatch(1, 500)).jobs).toBe(2);

    // A reconnect from the held id before the last member ends: the stream stays open (no 204) ...
    const early = await readRaw(url(batchId), { ...bearer(key), 'Last-Event-ID': held }, () => false, 300);
    expect(early.status).toBe(200);
    // ... and the held id is still where the stream is: no message at or below it is sent again.
    for (const id of idsOf(early.text)) expect(BigInt(id)).toBeGreaterThan(BigInt(held));

    const resumed = follow(url(batchId), key, { lastEventId: held });
    await resumed.over;
    resumed.close();
    expect(resumed.messages.at(-1)?.event).toBe('batch.completed');
    for (const m of resumed.messages) expect(BigInt(m.id)).toBeGreaterThan(BigInt(held));
    // Over after its last message: 204.
    const lastId = resumed.messages.at(-1)!.id;
    await sleep(50);
    const done = await t
      .http()
      .get(`/v1/batches/${batchId}/events`)
      .set(bearer(key))
      .set('Accept', 'text/event-stream')
      .set('Last-Event-ID', lastId);
    expect(done.status).toBe(204);
  }, 30_000);
});

describe("stream edges: a batch's streams share one progress read per change (issue 33 item 7)", () => {
  it('N streams of one batch cost one progress read per member commit, not N', async () => {
    // One worker slot and a steady provider: the batch's jobs settle one by one, each its own commit.
    const catalogFile = writeCatalog((c) => {
      c.providers.push({
        name: 'sim-steady',
        kind: 'simulated',
        model: 'sim-steady',
        timeoutMs: 5000,
        simulate: { latencyMs: 200, outcome: 'success' },
      });
    });
    const t = await startTestApp({
      role: 'all',
      catalogFile,
      workerPollMs: 20,
      workerConcurrency: 1,
      streamHeartbeatMs: 1000,
      maxStreamsPerOwner: 50,
    });
    try {
      const key = await t.key('owner-fan-out');
      const JOBS = 12;
      const STREAMS = 20;
      const items = Array.from({ length: JOBS }, (_, i) => ({
        key: `fan-${i}`,
        operation: 'summarize',
        input: { text: `fan ${i}` },
        providers: ['sim-steady'],
      }));
      const created = await t.http().post('/v1/batches').set(bearer(key)).set('Idempotency-Key', 'fan').send({ items });
      expect(created.status).toBe(201);
      const batchId = created.body.id as string;
      // The database really answers every read counted here: the repository's own statement, run on the pool.
      const repository = t.app.get(BatchesRepository);
      const findProgress = repository.findProgress.bind(repository);
      let reads = 0;
      repository.findProgress = (...args) => {
        reads++;
        return findProgress(...args);
      };
      const followers = Array.from({ length: STREAMS }, () => follow(`${t.baseUrl}/v1/batches/${batchId}/events`, key));
      // Every stream open and past its first read (each stream's own): from here on, count.
      await waitFor(
        async () => followers.every((f) => f.messages.length > 0),
        (open) => open,
      );
      reads = 0;
      const seen = followers.map((f) => f.messages.length);
      // Until every stream has batch.completed (a client's reconnect after it, answered 204, is no fan-out).
      await waitFor(
        async () => followers.every((f) => f.messages.at(-1)?.event === 'batch.completed'),
        (done) => done,
        30_000,
      );
      const counted = reads;
      await Promise.all(followers.map((f) => f.over));
      for (const f of followers) f.close();
      // The changes every stream was told of after the count began (the fewest any stream got).
      const changes = Math.min(...followers.map((f, i) => f.messages.length - seen[i]));
      expect(changes).toBeGreaterThanOrEqual(3);
      // Per change at most one shared read, and one more for a wake-up that raced it (and the stream's last read
      // at its end); the old fan-out read once per stream per change: STREAMS times as many.
      expect(counted).toBeLessThanOrEqual(2 * changes + 3);
    } finally {
      await t.close();
    }
  }, 60_000);
});

describe('stream edges: shutdown ends a stream whose client stopped reading (issue 33 item 10a)', () => {
  it('closes the app in time while a stream waits on a client that reads nothing', async () => {
    const t = await startTestApp({ role: 'api', streamHeartbeatMs: 1000 });
    let req: ReturnType<typeof get> | undefined;
    try {
      const key = await t.key('owner-stalled');
      const jobId = (await postJob(t, key)).id;
      // A timeline of ~20 MB: far more than the socket buffers hold, so the stream's write waits on the client.
      await t.dataSource.query(
        `INSERT INTO job_events (job_id, subject, from_status, to_status, reason, detail)
         SELECT $1, 'job', NULL, 'pending', 'created', jsonb_build_object('pad', repeat('x', 4000))
           FROM generate_series(1, 5000)`,
        [jobId],
      );
      const status = await new Promise<number>((resolve, reject) => {
        const headers = { ...bearer(key), Accept: 'text/event-stream' };
        req = get(`${t.baseUrl}/v1/jobs/${jobId}/events`, { headers, agent: false }, (res) => {
          res.pause(); // the client stops reading
          resolve(res.statusCode ?? 0);
        });
        req.on('error', reject);
      });
      expect(status).toBe(200);
      await sleep(1500);
      const started = Date.now();
      let timer: NodeJS.Timeout | undefined;
      const closed = await Promise.race([
        t.close().then(() => 'closed'),
        new Promise((resolve) => (timer = setTimeout(() => resolve('still open'), 15_000))),
      ]);
      clearTimeout(timer);
      expect(closed).toBe('closed');
      expect(Date.now() - started).toBeLessThan(10_000);
    } finally {
      req?.destroy();
    }
  }, 60_000);
});
