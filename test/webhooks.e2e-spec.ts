import { Webhook } from 'standardwebhooks';

import type { Env } from '../src/config/env.js';
import { LedgerFactory } from '../src/ledger/ledger.js';
import { WebhookDeliveriesRepository } from '../src/webhooks/webhook-deliveries.repository.js';
import { WebhookDispatcher } from '../src/webhooks/webhook-dispatcher.js';
import { postJob } from './factories/index.js';
import { bearer, startTestApp, type TestApp } from './helpers/app.js';
import { writeCatalog } from './helpers/catalog.js';
import { createTestDatabase } from './helpers/database.js';
import { spawnService, waitUntilReady } from './helpers/process.js';
import { sleep, waitFor } from './helpers/wait.js';
import { type Received, startReceiver } from './helpers/webhook-receiver.js';

/** WEBHOOK_ALLOWED_HOSTS for a receiver: its host and port only. */
const allow = (receiver: { port: number }) => [`127.0.0.1:${receiver.port}`];

/** A service with workers and the dispatcher, allowed to call the receiver on 127.0.0.1, with a schedule shrunk 1000x. */
const serviceEnv = (receiver: { port: number }, extra: Partial<Env> = {}): Partial<Env> => ({
  role: 'all',
  workerPollMs: 10,
  reconcileIntervalMs: 100,
  webhookAllowedHosts: allow(receiver),
  webhookBackoffScale: 0.001,
  webhookTimeoutMs: 1000,
  webhookPollMs: 20,
  shutdownGraceMs: 100,
  ...extra,
});

async function subscribe(
  t: TestApp,
  key: string,
  url: string,
  events = ['job.succeeded', 'job.failed', 'job.cancelled', 'attempt.unknown'],
) {
  const res = await t.http().post('/v1/webhooks').set(bearer(key)).send({ url, events });
  expect(res.status).toBe(201);
  expect(res.body.secret).toMatch(/^whsec_[A-Za-z0-9+/]+=*$/);
  return res.body as { id: string; secret: string };
}

const forJob = (received: Received[], jobId: string) => received.filter((r) => r.body.data.jobId === jobId);

describe('webhooks: a signed, transactional, at-least-once announcement of each settlement', () => {
  it('retries through three 500s and a timeout with one webhook-id, and each settled job is accepted exactly once', async () => {
    // Per event: 500, 500, 500, no answer (timeout), then 200.
    const receiver = await startReceiver((nth) => (nth <= 3 ? 500 : nth === 4 ? 'hold' : 200));
    const t = await startTestApp(serviceEnv(receiver));
    try {
      const key = await t.key('owner-hooks');
      const endpoint = await subscribe(t, key, receiver.url);
      receiver.trust(endpoint.secret);
      const jobs = await Promise.all(
        ['h-1', 'h-2', 'h-3'].map(async (k) => (await postJob(t, key, { idempotencyKey: k })).id),
      );

      await waitFor(
        async () => receiver.accepted().length,
        (n) => n >= 3,
        40_000,
      );
      await sleep(500); // nothing more arrives: each event was accepted once
      expect(receiver.accepted()).toHaveLength(3);
      expect(receiver.received.every((r) => r.verified)).toBe(true);
      for (const jobId of jobs) {
        const seen = forJob(receiver.received, jobId);
        expect(seen.map((r) => r.answered)).toEqual([500, 500, 500, 'hold', 200]);
        expect(new Set(seen.map((r) => r.webhookId)).size).toBe(1);
        expect(seen[4].body).toMatchObject({
          type: 'job.succeeded',
          data: { jobId, status: 'succeeded', version: 1, result: { summary: expect.any(String) } },
        });
        // Times as the REST API writes them (toISOString), not as jsonb renders a timestamptz.
        const rest = await t.http().get(`/v1/jobs/${jobId}`).set(bearer(key));
        expect(seen[4].body.data.completedAt).toBe(rest.body.completedAt);
        expect(seen[4].body.timestamp).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
        // Compact JSON in the documented order, as the REST API writes its answers (not jsonb's print).
        expect(seen[4].raw).toBe(JSON.stringify(seen[4].body));
        expect(Object.keys(seen[4].body.data)).toEqual([
          'jobId',
          'attemptId',
          'status',
          'operation',
          'idempotencyKey',
          'version',
          'result',
          'error',
          'completedBy',
          'completedAt',
        ]);
      }

      const listed = await t
        .http()
        .get(`/v1/webhooks/${endpoint.id}/deliveries`)
        .query({ jobId: jobs[0] })
        .set(bearer(key));
      expect(listed.status).toBe(200);
      expect(listed.body.items).toHaveLength(1);
      const [delivery] = listed.body.items;
      expect(delivery).toMatchObject({
        id: forJob(receiver.received, jobs[0])[0].webhookId,
        eventType: 'job.succeeded',
        status: 'succeeded',
        attempts: 5,
        lastStatusCode: 200,
      });
      expect(delivery.history.map((h: any) => h.statusCode)).toEqual([500, 500, 500, null, 200]);
      expect(delivery.history[3].error).toMatch(/timed out/);
      expect(delivery.history[3].latencyMs).toBeGreaterThanOrEqual(950);
      const metrics = (await t.http().get('/metrics')).text;
      expect(metrics).toMatch(/onejob_webhook_attempts_total\{outcome="delivered"\} 3\n/);
      expect(metrics).toMatch(/onejob_webhook_attempts_total\{outcome="failed"\} 12\n/);
    } finally {
      await t.close();
      await receiver.close();
    }
  }, 90_000);

  it('announces a job whose late result is discarded once: no second job.succeeded', async () => {
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
        simulate: { latencyMs: 1200 },
      });
      c.providers.push({
        name: 'fast-b',
        kind: 'simulated',
        model: 'b',
        timeoutMs: 2000,
        simulate: { latencyMs: 100 },
      });
    });
    const t = await startTestApp(serviceEnv(receiver, { catalogFile }));
    try {
      const key = await t.key('owner-late');
      receiver.trust((await subscribe(t, key, receiver.url)).secret);
      const cert = await t
        .http()
        .post('/v1/providers/fast-b/certifications')
        .set(bearer(key))
        .send({ operation: 'summarize' });
      expect(cert.body.passed).toBe(true);
      const jobId = (await postJob(t, key, { idempotencyKey: 'late', providers: ['slow-a', 'fast-b'] })).id;
      await waitFor(
        async () => (await t.http().get(`/v1/jobs/${jobId}`).set(bearer(key))).body,
        (j) => j.attempts?.[0]?.outcome === 'discarded',
        20_000,
      );
      await sleep(500);
      const succeeded = forJob(receiver.received, jobId).filter((r) => r.body.type === 'job.succeeded');
      expect(succeeded).toHaveLength(1);
      expect(succeeded[0].body.data.completedBy).not.toBeNull();
      const rows = await t.dataSource.query(
        `SELECT event_type FROM webhook_deliveries WHERE job_id = $1 AND event_type = 'job.succeeded'`,
        [jobId],
      );
      expect(rows).toHaveLength(1);
      // The failover passed through `unknown`: that transition is announced too, once.
      expect(forJob(receiver.received, jobId).filter((r) => r.body.type === 'attempt.unknown')).toHaveLength(1);
      expect(receiver.received.every((r) => r.verified)).toBe(true);
    } finally {
      await t.close();
      await receiver.close();
    }
  }, 90_000);

  it('writes the delivery in the settling transaction: nothing for an owner without endpoints, nothing for unsubscribed events', async () => {
    const receiver = await startReceiver(() => 200);
    const t = await startTestApp(serviceEnv(receiver));
    try {
      const subscriber = await t.key('owner-sub');
      const other = await t.key('owner-none');
      receiver.trust((await subscribe(t, subscriber, receiver.url, ['job.failed'])).secret);
      const a = (await postJob(t, subscriber, { idempotencyKey: 'ok-1' })).id;
      const b = (await postJob(t, other, { idempotencyKey: 'ok-2' })).id;
      for (const id of [a, b]) {
        await waitFor(
          async () => (await t.dataSource.query('SELECT status FROM jobs WHERE id = $1', [id]))[0].status,
          (s) => s === 'succeeded',
        );
      }
      await sleep(200);
      expect(await t.dataSource.query('SELECT count(*)::int AS n FROM webhook_deliveries')).toEqual([{ n: 0 }]);
      expect(receiver.received).toHaveLength(0);
    } finally {
      await t.close();
      await receiver.close();
    }
  }, 90_000);

  it('announces a committed settlement and never a rolled-back one', async () => {
    const receiver = await startReceiver(() => 200);
    const t = await startTestApp({ role: 'api', webhookAllowedHosts: allow(receiver) });
    try {
      const key = await t.key('owner-tx');
      await subscribe(t, key, receiver.url, ['job.cancelled']);
      const jobId = (await postJob(t, key, { idempotencyKey: 'tx' })).id;
      const ledgers = t.app.get(LedgerFactory);
      const cancelThen = (fail: boolean) =>
        ledgers.run(async (ledger) => {
          const job = await ledger.lockOwnedJob('owner-tx', jobId);
          expect(await ledger.cancel(job!)).toBe(true);
          if (fail) throw new Error('rolled back after the settlement');
        });
      await expect(cancelThen(true)).rejects.toThrow('rolled back');
      const count = async () =>
        (await t.dataSource.query('SELECT count(*)::int AS n FROM webhook_deliveries WHERE job_id = $1', [jobId]))[0].n;
      expect(await count()).toBe(0);
      await cancelThen(false);
      expect(await count()).toBe(1);
    } finally {
      await t.close();
      await receiver.close();
    }
  }, 90_000);

  it('delivers after restart when the app is closed while the receiver holds the request', async () => {
    const receiver = await startReceiver(() => 'hold');
    const database = await createTestDatabase();
    const first = await startTestApp(serviceEnv(receiver, { webhookTimeoutMs: 5000 }), database);
    let second: TestApp | undefined;
    try {
      const key = await first.key('owner-restart');
      receiver.trust((await subscribe(first, key, receiver.url)).secret);
      const jobId = (await postJob(first, key, { idempotencyKey: 'restart' })).id;
      await waitFor(
        async () => receiver.received.length,
        (n) => n === 1,
        30_000,
      );
      receiver.behave(() => 200);
      await first.close(); // the receiver still holds the first request

      second = await startTestApp(serviceEnv(receiver, { webhookTimeoutMs: 5000 }), database);
      await waitFor(
        async () => receiver.accepted().length,
        (n) => n === 1,
        30_000,
      );
      await sleep(300);
      const seen = forJob(receiver.received, jobId);
      expect(seen.map((r) => r.answered)).toEqual(['hold', 200]);
      expect(seen[1].webhookId).toBe(seen[0].webhookId);
      expect(seen.every((r) => r.verified)).toBe(true);
      const [row] = await second.dataSource.query('SELECT status, attempts FROM webhook_deliveries WHERE job_id = $1', [
        jobId,
      ]);
      expect(row).toEqual({ status: 'succeeded', attempts: 2 });
    } finally {
      await second?.close();
      await database.drop();
      await receiver.close();
    }
  }, 90_000);

  it('delivers after a SIGKILL of the dispatcher mid-delivery, once its lease runs out', async () => {
    const receiver = await startReceiver(() => 'hold');
    const api = await startTestApp({ role: 'api', webhookAllowedHosts: allow(receiver) });
    const env = {
      DATABASE_URL: api.database.url,
      CATALOG_FILE: 'test/fixtures/catalog.test.yaml',
      ROLE: 'worker',
      WORKER_POLL_MS: '20',
      WEBHOOK_POLL_MS: '20',
      WEBHOOK_TIMEOUT_MS: '1000',
      WEBHOOK_ALLOWED_HOSTS: allow(receiver).join(','),
    };
    const victim = await spawnService(env);
    let survivor: Awaited<ReturnType<typeof spawnService>> | undefined;
    try {
      await waitUntilReady(victim);
      const key = await api.key('owner-kill');
      receiver.trust((await subscribe(api, key, receiver.url)).secret);
      const jobId = (await postJob(api, key, { idempotencyKey: 'kill' })).id;
      await waitFor(
        async () => receiver.received.length,
        (n) => n === 1,
        30_000,
      );
      victim.kill('SIGKILL');
      await victim.exited;
      receiver.behave(() => 200);

      survivor = await spawnService(env);
      await waitUntilReady(survivor);
      // The lease (2 x WEBHOOK_TIMEOUT_MS + 1 s) runs out, then the survivor sends it again with the same id.
      await waitFor(
        async () => receiver.accepted().length,
        (n) => n === 1,
        40_000,
      );
      const seen = forJob(receiver.received, jobId);
      expect(seen.map((r) => r.answered)).toEqual(['hold', 200]);
      expect(seen[1].webhookId).toBe(seen[0].webhookId);
      // The receiver answers before the dispatcher records the answer: wait for the record.
      const row = await waitFor(
        async () =>
          (await api.dataSource.query('SELECT status, attempts FROM webhook_deliveries WHERE job_id = $1', [jobId]))[0],
        (r: { status: string }) => r.status !== 'pending',
        5_000,
      );
      expect(row).toEqual({ status: 'succeeded', attempts: 2 });
    } finally {
      victim.kill('SIGKILL');
      survivor?.kill('SIGTERM');
      await survivor?.exited;
      await api.close();
      await receiver.close();
    }
  }, 90_000);

  it('disables an endpoint that keeps failing, says why, and refuses a manual retry until it is enabled', async () => {
    const receiver = await startReceiver(() => 500);
    const t = await startTestApp(serviceEnv(receiver));
    try {
      const key = await t.key('owner-failing');
      const endpoint = await subscribe(t, key, receiver.url, ['job.succeeded']);
      receiver.trust(endpoint.secret);
      // Failing for more than three days already: the next failed attempt disables it.
      await t.dataSource.query(
        `UPDATE webhook_endpoints SET failing_since = now() - interval '73 hours' WHERE id = $1`,
        [endpoint.id],
      );
      const jobId = (await postJob(t, key, { idempotencyKey: 'fail-1' })).id;
      const listed = await waitFor(
        async () => (await t.http().get('/v1/webhooks').set(bearer(key))).body.items[0],
        (e) => e.status === 'disabled',
        30_000,
      );
      expect(listed.disabledReason).toMatch(/failed for more than 72 hours/);
      expect((await t.http().get('/metrics')).text).toMatch(/onejob_webhook_endpoints_disabled_total 1\n/);
      expect(listed.secret).toBeUndefined();
      const [delivery] = (await t.http().get(`/v1/webhooks/${endpoint.id}/deliveries`).set(bearer(key))).body.items;
      expect(delivery).toMatchObject({ jobId, status: 'pending', attempts: 1, lastStatusCode: 500 });

      const refused = await t
        .http()
        .post(`/v1/webhooks/${endpoint.id}/deliveries/${delivery.id}/retry`)
        .set(bearer(key));
      expect(refused.status).toBe(409);
      expect(refused.body.code).toBe('webhook_disabled');
      expect(refused.headers['content-type']).toMatch(/application\/problem\+json/);

      receiver.behave(() => 204);
      // Its backoff would make it due again within milliseconds here: put it off, so the only attempt is the retry.
      await t.dataSource.query(
        `UPDATE webhook_deliveries SET next_attempt_at = now() + interval '1 hour' WHERE id = $1`,
        [delivery.id],
      );
      expect((await t.http().post(`/v1/webhooks/${endpoint.id}/enable`).set(bearer(key))).body.status).toBe('enabled');
      const retried = await t
        .http()
        .post(`/v1/webhooks/${endpoint.id}/deliveries/${delivery.id}/retry`)
        .set(bearer(key));
      expect(retried.status).toBe(202);
      await waitFor(
        async () => receiver.accepted().length,
        (n) => n === 1,
        5000,
      );
      expect(receiver.received.every((r) => r.verified)).toBe(true);
      expect(new Set(receiver.received.map((r) => r.webhookId)).size).toBe(1);
    } finally {
      await t.close();
      await receiver.close();
    }
  }, 90_000);

  it('manages endpoints per owner: URL checks, scopes, one-time secret, rotation signs with both secrets', async () => {
    const receiver = await startReceiver(() => 200);
    const t = await startTestApp(serviceEnv(receiver));
    try {
      const key = await t.key('owner-manage');
      const reader = await t.key('owner-manage', ['jobs:read']);
      const stranger = await t.key('owner-other');
      const post = (k: string, body: object) => t.http().post('/v1/webhooks').set(bearer(k)).send(body);

      for (const url of [
        'http://example.com/hook',
        'https://169.254.169.254/latest',
        'https://[::1]/x',
        'https://localhost/x',
        'ftp://example.com/',
      ]) {
        const res = await post(key, { url, events: ['job.succeeded'] });
        expect({ url, status: res.status, code: res.body.code, field: res.body.errors?.[0]?.field }).toEqual({
          url,
          status: 422,
          code: 'validation_failed',
          field: 'url',
        });
      }
      expect((await post(key, { url: receiver.url, events: ['job.exploded'] })).status).toBe(400);
      expect((await post(key, { url: receiver.url, events: [] })).status).toBe(400);
      expect((await post(reader, { url: receiver.url, events: ['job.succeeded'] })).status).toBe(403);

      const endpoint = await subscribe(t, key, receiver.url, ['job.succeeded']);
      const list = await t.http().get('/v1/webhooks').set(bearer(reader));
      expect(list.status).toBe(200);
      expect(list.body.items).toEqual([
        expect.objectContaining({ id: endpoint.id, url: receiver.url, events: ['job.succeeded'], status: 'enabled' }),
      ]);
      expect(JSON.stringify(list.body)).not.toContain('whsec_');
      expect((await t.http().get('/v1/webhooks').set(bearer(stranger))).body.items).toEqual([]);
      expect((await t.http().delete(`/v1/webhooks/${endpoint.id}`).set(bearer(stranger))).status).toBe(404);
      expect((await t.http().get(`/v1/webhooks/${endpoint.id}/deliveries`).set(bearer(stranger))).status).toBe(404);

      const rotated = await t.http().post(`/v1/webhooks/${endpoint.id}/rotate-secret`).set(bearer(key));
      expect(rotated.status).toBe(200);
      expect(rotated.body.secret).toMatch(/^whsec_/);
      expect(rotated.body.secret).not.toBe(endpoint.secret);
      // A receiver that knows only the new secret verifies; one that knows only the old does too (overlap).
      receiver.trust(rotated.body.secret);
      const jobId = (await postJob(t, key, { idempotencyKey: 'rotated' })).id;
      await waitFor(
        async () => receiver.accepted().length,
        (n) => n === 1,
        30_000,
      );
      expect(await t.dataSource.query('SELECT id FROM webhook_deliveries WHERE job_id = $1', [jobId])).toHaveLength(1);
      const [seen] = receiver.received;
      expect(seen.headers['webhook-signature'].split(' ')).toHaveLength(2);
      expect(() => new Webhook(rotated.body.secret).verify(seen.raw, seen.headers)).not.toThrow();
      expect(() => new Webhook(endpoint.secret).verify(seen.raw, seen.headers)).not.toThrow();
      // A tampered body fails verification: the signature covers id, timestamp and body.
      expect(() =>
        new Webhook(rotated.body.secret).verify(seen.raw.replace('succeeded', 'failed'), seen.headers),
      ).toThrow();

      expect((await t.http().delete(`/v1/webhooks/${endpoint.id}`).set(bearer(key))).status).toBe(204);
      expect((await t.http().get('/v1/webhooks').set(bearer(key))).body.items).toEqual([]);
      expect(await t.dataSource.query('SELECT count(*)::int AS n FROM webhook_deliveries')).toEqual([{ n: 0 }]);
    } finally {
      await t.close();
      await receiver.close();
    }
  }, 90_000);

  it('claims each due delivery once across concurrent dispatchers (FOR UPDATE SKIP LOCKED)', async () => {
    const t = await startTestApp({ role: 'api', webhookAllowedHosts: ['127.0.0.1:9'] });
    try {
      const key = await t.key('owner-claims');
      await subscribe(t, key, 'http://127.0.0.1:9/never', ['job.cancelled']);
      const ids = await Promise.all(
        Array.from({ length: 40 }, async (_, i) => (await postJob(t, key, { idempotencyKey: `c-${i}` })).id),
      );
      for (const id of ids) expect((await t.http().post(`/v1/jobs/${id}/cancel`).set(bearer(key))).status).toBe(200);
      const repo = t.app.get(WebhookDeliveriesRepository);
      const claims = await Promise.all(Array.from({ length: 8 }, () => repo.claimDue(10, 60_000)));
      const claimed = claims.flat().map((c) => c.id);
      expect(claimed).toHaveLength(40);
      expect(new Set(claimed).size).toBe(40);
      expect(await repo.claimDue(10, 60_000)).toEqual([]);
    } finally {
      await t.close();
    }
  }, 90_000);

  it('checks the address again before each call: an endpoint pointing at loopback without being allowed is never called', async () => {
    const receiver = await startReceiver(() => 200);
    const t = await startTestApp({ role: 'api' }); // 127.0.0.1 not allowed here
    try {
      const key = await t.key('owner-rebind');
      // As if the host had resolved to a public address at creation and to loopback now.
      await t.dataSource.query(
        `INSERT INTO webhook_endpoints (owner_id, url, events, secret) VALUES ('owner-rebind', $1, '{job.cancelled}', 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw')`,
        [receiver.url.replace('http://127.0.0.1', 'https://localhost')],
      );
      const jobId = (await postJob(t, key, { idempotencyKey: 'rebind' })).id;
      expect((await t.http().post(`/v1/jobs/${jobId}/cancel`).set(bearer(key))).status).toBe(200);
      const [claimed] = await t.app.get(WebhookDeliveriesRepository).claimDue(10, 60_000);
      await t.app.get(WebhookDispatcher).send(claimed);
      expect(receiver.received).toHaveLength(0);
      const [attempt] = await t.dataSource.query('SELECT status_code, error FROM webhook_delivery_attempts');
      expect(attempt).toEqual({ status_code: null, error: expect.stringMatching(/^refused: .*loopback/) });
    } finally {
      await t.close();
      await receiver.close();
    }
  }, 90_000);
});
