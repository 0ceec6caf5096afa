import type { Env } from '../src/config/env.js';
import { bearer, startTestApp, type TestApp } from './helpers/app.js';
import { writeCatalog } from './helpers/catalog.js';
import { sleep, waitFor } from './helpers/wait.js';
import { type Received, startReceiver } from './helpers/webhook-receiver.js';

/** A service with workers and the dispatcher, allowed to call the receiver on 127.0.0.1. */
const serviceEnv = (receiver: { port: number }, extra: Partial<Env> = {}): Partial<Env> => ({
  role: 'all',
  workerPollMs: 10,
  reconcileIntervalMs: 100,
  webhookAllowedHosts: [`127.0.0.1:${receiver.port}`],
  webhookBackoffScale: 0.001,
  webhookTimeoutMs: 1000,
  webhookPollMs: 20,
  shutdownGraceMs: 100,
  ...extra,
});

async function subscribe(t: TestApp, key: string, url: string, events: string[]) {
  const res = await t.http().post('/v1/webhooks').set(bearer(key)).send({ url, events });
  expect(res.status).toBe(201);
  return res.body as { id: string; secret: string };
}

const completions = (received: Received[], batchId: string) =>
  received.filter((r) => r.body.type === 'batch.completed' && r.body.data.batchId === batchId);

const items = (prefix: string, n: number, providers?: string[]) =>
  Array.from({ length: n }, (_, i) => ({
    key: `${prefix}-${i}`,
    operation: 'summarize',
    input: { text: `${prefix} ${i}` },
    ...(providers ? { providers } : {}),
  }));
const postBatch = (t: TestApp, key: string, batchKey: string, body: unknown) =>
  t
    .http()
    .post('/v1/batches')
    .set(bearer(key))
    .set('Idempotency-Key', batchKey)
    .send(body as object);

describe('batch.completed: announced once, in the transaction that makes the last job terminal (I10)', () => {
  it('is written with the last settlement, sent once; a batch of finished jobs announces as it commits', async () => {
    const receiver = await startReceiver(() => 200);
    const t = await startTestApp(serviceEnv(receiver));
    try {
      const key = await t.key('owner-batch-hooks');
      receiver.trust((await subscribe(t, key, receiver.url, ['batch.completed', 'job.succeeded'])).secret);
      const created = await postBatch(t, key, 'hooked', { items: items('h', 12) });
      expect(created.status).toBe(201);
      const batchId = created.body.id as string;

      await waitFor(
        async () => completions(receiver.received, batchId).length,
        (n) => n >= 1,
        30_000,
      );
      const [delivery] = await t.dataSource.query(
        `SELECT d.created_at, b.completed_at AS batch_completed_at,
                (SELECT array_agg(j.completed_at) FROM batch_items i JOIN jobs j ON j.id = i.job_id
                  WHERE i.batch_id = b.id AND j.xmin::text = b.xmin::text) AS settled_with_it,
                (SELECT count(*)::int FROM batch_items i JOIN jobs j ON j.id = i.job_id
                  WHERE i.batch_id = d.batch_id AND j.status IN ('pending', 'running', 'unknown')) AS live
           FROM webhook_deliveries d JOIN batches b ON b.id = d.batch_id WHERE d.batch_id = $1`,
        [batchId],
      );
      // The batch row was last written by a transaction that also wrote (settled) one of its jobs, and the delivery
      // shares that transaction's now(): it was written with the settlement that ended the last job.
      expect(delivery.settled_with_it?.length).toBeGreaterThanOrEqual(1);
      expect(delivery.settled_with_it[0].getTime()).toBe(delivery.created_at.getTime());
      expect(delivery.batch_completed_at.getTime()).toBe(delivery.created_at.getTime());
      expect(delivery.live).toBe(0);
      const [announced] = completions(receiver.received, batchId);
      expect(announced.verified).toBe(true);
      expect(announced.raw).toBe(JSON.stringify(announced.body));
      expect(announced.body.data).toEqual({
        batchId,
        idempotencyKey: 'hooked',
        items: 12,
        counts: { succeeded: 12, failed: 0, cancelled: 0, conflict: 0 },
        completedAt: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/),
      });
      const rest = await t.http().get(`/v1/batches/${batchId}`).set(bearer(key));
      const completedAt = announced.body.data.completedAt;
      expect(rest.body).toMatchObject({ status: 'completed', liveJobs: 0, completedAt });
      expect(rest.body.counts).toMatchObject({ succeeded: 12 });

      // The same jobs under a new batch key: all replayed, all terminal, so the batch is complete as it commits.
      const again = await postBatch(t, key, 'hooked-again', { items: items('h', 12) });
      expect(again.status).toBe(201);
      expect(again.body).toMatchObject({ status: 'completed', liveJobs: 0 });
      await waitFor(
        async () => completions(receiver.received, again.body.id).length,
        (n) => n >= 1,
        10_000,
      );
      await sleep(500);
      expect(completions(receiver.received, batchId)).toHaveLength(1);
      expect(completions(receiver.received, again.body.id)).toHaveLength(1);
      const rows = await t.dataSource.query(
        `SELECT batch_id FROM webhook_deliveries WHERE event_type = 'batch.completed'`,
      );
      expect(rows).toHaveLength(2);
      const [endpoint] = await t.dataSource.query('SELECT id FROM webhook_endpoints');
      const listed = await t.http().get(`/v1/webhooks/${endpoint.id}/deliveries`).set(bearer(key));
      expect(listed.status).toBe(200);
      const batchDeliveries = listed.body.items.filter((d: { eventType: string }) => d.eventType === 'batch.completed');
      expect(batchDeliveries.map((d: { batchId: string; jobId: null }) => [d.batchId, d.jobId]).sort()).toEqual(
        [
          [batchId, null],
          [again.body.id, null],
        ].sort(),
      );
    } finally {
      await t.close();
      await receiver.close();
    }
  }, 60_000);

  it('announces nothing more when a late result is discarded after the batch completed', async () => {
    const receiver = await startReceiver(() => 200);
    const catalogFile = writeCatalog((c) => {
      c.providers.push({
        name: 'slow-a',
        kind: 'simulated',
        model: 'a',
        timeoutMs: 200,
        hardTimeoutMs: 5000,
        onTimeout: 'failover',
        sideEffectFree: true,
        simulate: { latencyMs: 1500 },
      });
      c.providers.push({ name: 'fast-b', kind: 'simulated', model: 'b', timeoutMs: 2000, simulate: { latencyMs: 50 } });
    });
    const t = await startTestApp(serviceEnv(receiver, { catalogFile }));
    try {
      const key = await t.key('owner-batch-late');
      receiver.trust((await subscribe(t, key, receiver.url, ['batch.completed'])).secret);
      const cert = await t
        .http()
        .post('/v1/providers/fast-b/certifications')
        .set(bearer(key))
        .send({ operation: 'summarize' });
      expect(cert.body.passed).toBe(true);
      const created = await postBatch(t, key, 'late', { items: items('l', 3, ['slow-a', 'fast-b']) });
      expect(created.status).toBe(201);
      const batchId = created.body.id as string;
      // Every job won by fast-b, then slow-a's late result arrives and is discarded.
      await waitFor(
        async () =>
          t.dataSource.query(
            `SELECT count(*)::int AS n FROM attempts WHERE provider = 'slow-a' AND outcome = 'discarded'`,
          ),
        (rows) => rows[0].n === 3,
        30_000,
      );
      await waitFor(
        async () => completions(receiver.received, batchId).length,
        (n) => n >= 1,
        10_000,
      );
      await sleep(500);
      expect(completions(receiver.received, batchId)).toHaveLength(1);
      expect(completions(receiver.received, batchId)[0].body.data.counts).toMatchObject({ succeeded: 3 });
      const rows = await t.dataSource.query(`SELECT id FROM webhook_deliveries WHERE batch_id = $1`, [batchId]);
      expect(rows).toHaveLength(1);
      const [batch] = await t.dataSource.query('SELECT live_jobs FROM batches WHERE id = $1', [batchId]);
      expect(batch.live_jobs).toBe(0);
    } finally {
      await t.close();
      await receiver.close();
    }
  }, 60_000);
});
