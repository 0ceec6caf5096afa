import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import type { Env } from '../src/config/env.js';
import { WebhookDeliveriesRepository } from '../src/webhooks/webhook-deliveries.repository.js';
import { WebhookDispatcher } from '../src/webhooks/webhook-dispatcher.js';
import { bearer, startTestApp, type TestApp } from './helpers/app.js';
import { sleep } from './helpers/wait.js';
import { startReceiver } from './helpers/webhook-receiver.js';

// A forced full collection inside jest (see src/common/deadline.spec.ts).
setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

/** Only the API: the tests drive the dispatcher by hand (claimDue, send) to control what happens when. */
const apiEnv = (receiverUrl: string, extra: Partial<Env> = {}): Partial<Env> => ({
  role: 'api',
  webhookAllowedHosts: [new URL(receiverUrl).host, new URL(receiverUrl).hostname],
  webhookTimeoutMs: 300,
  ...extra,
});

async function subscribe(t: TestApp, key: string, url: string, events = ['job.cancelled']) {
  const res = await t.http().post('/v1/webhooks').set(bearer(key)).send({ url, events });
  expect(res.status).toBe(201);
  return res.body as { id: string; secret: string };
}

/** A cancelled job: one job.cancelled delivery per subscribed endpoint of the owner, due now. */
async function cancelledJob(t: TestApp, key: string, idempotencyKey: string): Promise<string> {
  const created = await t.http().post('/v1/jobs').set(bearer(key)).set('Idempotency-Key', idempotencyKey).send({ operation: 'summarize', input: { text: idempotencyKey } });
  expect(created.status).toBe(201);
  expect((await t.http().post(`/v1/jobs/${created.body.id}/cancel`).set(bearer(key))).status).toBe(200);
  return created.body.id as string;
}

const attemptsOf = (t: TestApp, jobId: string) =>
  t.dataSource.query(
    `SELECT a.status_code, a.error, a.latency_ms FROM webhook_delivery_attempts a JOIN webhook_deliveries d ON d.id = a.delivery_id
      WHERE d.job_id = $1 ORDER BY a.id`,
    [jobId],
  );

describe('webhooks hardening', () => {
  it('times a delivery out at WEBHOOK_TIMEOUT_MS although a garbage collection ran during the call', async () => {
    const receiver = await startReceiver(() => 'hold');
    const t = await startTestApp(apiEnv(receiver.url));
    try {
      const key = await t.key('owner-gc');
      await subscribe(t, key, receiver.url);
      const jobId = await cancelledJob(t, key, 'gc');
      const claimed = await t.app.get(WebhookDeliveriesRepository).claimDue(10, 60_000);
      expect(claimed).toHaveLength(1);
      const sending = t.app.get(WebhookDispatcher).send(claimed[0]);
      while (receiver.received.length === 0) await sleep(10);
      // The request is in flight and its timeout armed: a full collection now must not disarm it.
      gc();
      gc();
      // 300 ms promised; 5 s is ample slack on a loaded machine and far below undici's 300 s headers timeout.
      const outcome = await Promise.race([sending.then(() => 'recorded'), sleep(5_000).then(() => 'still in flight')]);
      expect(outcome).toBe('recorded');
      const [attempt] = await attemptsOf(t, jobId);
      expect(attempt).toMatchObject({ status_code: null, error: 'timed out after 300 ms' });
    } finally {
      await t.close();
      await receiver.close();
    }
  }, 30_000);
});
