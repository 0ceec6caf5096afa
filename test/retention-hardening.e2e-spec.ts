import { jest } from '@jest/globals';
import { Logger } from '@nestjs/common';

import { RetentionSweeper } from '../src/retention/retention-sweeper.js';
import { bearer, startTestApp } from './helpers/app.js';
import { writeCatalog } from './helpers/catalog.js';
import { sleep, waitFor } from './helpers/wait.js';
import { startReceiver } from './helpers/webhook-receiver.js';

/** Every call of one Logger level, as [message, fields] pairs. */
function spyLog(level: 'error' | 'warn' | 'log') {
  const spy = jest.spyOn(Logger.prototype, level);
  return {
    calls: () => spy.mock.calls.map(([fields]) => fields as Record<string, unknown>),
    restore: () => spy.mockRestore(),
  };
}

describe('retention hardening', () => {
  afterEach(() => jest.restoreAllMocks());

  it('does not purge pending webhook deliveries silently: counted in the log line and in a metric', async () => {
    const receiver = await startReceiver(() => 'hold');
    const t = await startTestApp({
      role: 'api',
      webhookAllowedHosts: [`127.0.0.1:${receiver.port}`],
      jobRetentionDays: 30,
    });
    const warn = spyLog('warn');
    try {
      const key = await t.key('owner-purged');
      expect(
        (
          await t
            .http()
            .post('/v1/webhooks')
            .set(bearer(key))
            .send({ url: receiver.url, events: ['job.cancelled'] })
        ).status,
      ).toBe(201);
      const created = await t
        .http()
        .post('/v1/jobs')
        .set(bearer(key))
        .set('Idempotency-Key', 'purged')
        .send({ operation: 'summarize', input: { text: 'x' } });
      expect((await t.http().post(`/v1/jobs/${created.body.id}/cancel`).set(bearer(key))).status).toBe(200);
      // Not delivered (role api: no dispatcher), then old enough to purge.
      await t.dataSource.query(
        `UPDATE jobs SET created_at = now() - interval '31 days', completed_at = now() - interval '31 days' WHERE id = $1`,
        [created.body.id],
      );

      expect(await t.app.get(RetentionSweeper).sweep(30)).toBe(1);
      expect(await t.dataSource.query('SELECT count(*)::int AS n FROM webhook_deliveries')).toEqual([{ n: 0 }]);
      expect(warn.calls()).toContainEqual(expect.objectContaining({ count: 1, pendingWebhookDeliveries: 1 }));
      expect((await t.http().get('/metrics')).text).toMatch(
        /onejob_retention_pending_webhook_deliveries_purged_total 1\n/,
      );
    } finally {
      await t.close();
      await receiver.close();
    }
  }, 30_000);

  it('logs a late result of a purged job as such, not as an error for the reconciler', async () => {
    const catalogFile = writeCatalog((c) => {
      c.providers.push({
        name: 'slow-a',
        kind: 'simulated',
        model: 'a',
        timeoutMs: 200,
        hardTimeoutMs: 8000,
        onTimeout: 'failover',
        sideEffectFree: true,
        simulate: { latencyMs: 2500 },
      });
      c.providers.push({ name: 'fast-b', kind: 'simulated', model: 'b', timeoutMs: 2000, simulate: { latencyMs: 50 } });
    });
    const t = await startTestApp({
      role: 'all',
      workerPollMs: 10,
      reconcileIntervalMs: 100,
      catalogFile,
      jobRetentionDays: 30,
      shutdownGraceMs: 100,
    });
    const error = spyLog('error');
    try {
      const key = await t.key('owner-late');
      expect(
        (await t.http().post('/v1/providers/fast-b/certifications').set(bearer(key)).send({ operation: 'summarize' }))
          .body.passed,
      ).toBe(true);
      const created = await t
        .http()
        .post('/v1/jobs')
        .set(bearer(key))
        .set('Idempotency-Key', 'late')
        .send({ operation: 'summarize', input: { text: 'x' }, providers: ['slow-a', 'fast-b'] });
      const jobId = created.body.id as string;
      await waitFor(
        async () => (await t.dataSource.query('SELECT status FROM jobs WHERE id = $1', [jobId]))[0].status,
        (s) => s === 'succeeded',
        20_000,
      );
      // slow-a's call is still out; its job is purged before the answer comes back.
      await t.dataSource.query(
        `UPDATE jobs SET created_at = now() - interval '31 days', completed_at = now() - interval '31 days' WHERE id = $1`,
        [jobId],
      );
      expect(await t.app.get(RetentionSweeper).sweep(30)).toBe(1);
      const info = spyLog('log');
      const warn = spyLog('warn');
      // The simulated call answers 2.5 s after it started; 10 s is ample.
      await waitFor(
        async () => [...info.calls(), ...warn.calls(), ...error.calls()].filter((c) => c.jobId === jobId).length,
        (n) => n > 0,
        10_000,
      ).catch(() => undefined);
      await sleep(200);
      const errors = error.calls().filter((c) => c.jobId === jobId);
      expect(errors).toEqual([]);
      expect([...info.calls(), ...warn.calls()]).toContainEqual(
        expect.objectContaining({ msg: expect.stringMatching(/purged/), jobId }),
      );
    } finally {
      await t.close();
    }
  }, 40_000);
});
