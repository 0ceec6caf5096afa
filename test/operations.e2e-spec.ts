import { BacklogSampler } from '../src/metrics/backlog-sampler.js';
import { bearer, startTestApp, type TestApp } from './helpers/app.js';
import { writeCatalog } from './helpers/catalog.js';
import { createTestDatabase, type TestDatabase } from './helpers/database.js';
import { spawnService, waitUntilReady } from './helpers/process.js';
import { waitFor } from './helpers/wait.js';

const SERIES = [
  'onejob_jobs_created_total',
  'onejob_jobs_replayed_total',
  'onejob_idempotency_conflicts_total',
  'onejob_attempts_total',
  'onejob_attempts_unknown',
  'onejob_settlement_races_total',
  'onejob_jobs_settled_total',
  'onejob_attempt_duration_seconds',
  'onejob_http_request_duration_seconds',
  'onejob_process_resident_memory_bytes',
  'onejob_jobs_due',
  'onejob_oldest_due_job_age_seconds',
  'onejob_build_info',
];

function counter(text: string, series: string): number {
  const line = text.split('\n').find((l) => l.startsWith(series) && !l.startsWith('#'));
  return line ? Number(line.split(' ').pop()) : 0;
}

describe('operating the service: metrics, logs, roles', () => {
  describe('metrics', () => {
    let t: TestApp;
    let key: string;
    beforeAll(async () => {
      // late-a answers 1.4 s after its deadline: time enough, on a loaded machine, for the failover to win first.
      const catalogFile = writeCatalog((c) => {
        c.providers.push({
          name: 'late-a',
          kind: 'simulated',
          model: 'a',
          timeoutMs: 100,
          hardTimeoutMs: 3000,
          onTimeout: 'failover',
          sideEffectFree: true,
          simulate: { latencyMs: 1500 },
        });
        c.providers.push({
          name: 'quick-b',
          kind: 'simulated',
          model: 'b',
          timeoutMs: 2000,
          simulate: { latencyMs: 10 },
        });
      });
      t = await startTestApp({ role: 'all', catalogFile, workerPollMs: 10, reconcileIntervalMs: 100 });
      key = await t.key('metrics-owner');
    });
    afterAll(() => t.close());

    const scrape = async () => (await t.http().get('/metrics').expect(200)).text;
    const post = (k: string, body: object) =>
      t.http().post('/v1/jobs').set(bearer(key)).set('Idempotency-Key', k).send(body);

    it('exposes every named series, and the counters move when a replay, a 409 and a discarded late result happen', async () => {
      const before = await scrape();
      for (const series of SERIES) expect(before).toContain(series);

      const body = { operation: 'summarize', input: { text: 'm' } };
      await post('m1', body).expect(201);
      await post('m1', body).expect(200);
      await post('m1', { ...body, input: { text: 'other' } }).expect(409);

      await t
        .http()
        .post('/v1/providers/quick-b/certifications')
        .set(bearer(key))
        .send({ operation: 'summarize' })
        .expect(201);
      const raced = await post('m2', { ...body, providers: ['late-a', 'quick-b'] }).expect(201);
      await waitFor(
        async () => (await t.http().get(`/v1/jobs/${raced.body.id}`).set(bearer(key))).body,
        (job) => job.attempts?.[0]?.outcome === 'discarded',
      );

      const after = await scrape();
      // ROLE=all samples the backlog by itself, from the start.
      expect(after).toMatch(/^onejob_oldest_due_job_age_seconds\{state="ready"\} [\d.]+$/m);
      expect(counter(after, 'onejob_jobs_replayed_total') - counter(before, 'onejob_jobs_replayed_total')).toBe(1);
      expect(
        counter(after, 'onejob_idempotency_conflicts_total') - counter(before, 'onejob_idempotency_conflicts_total'),
      ).toBe(1);
      expect(counter(after, 'onejob_settlement_races_total{provider="late-a"}')).toBe(1);
      expect(
        counter(after, 'onejob_jobs_created_total{operation="summarize"}') -
          counter(before, 'onejob_jobs_created_total{operation="summarize"}'),
      ).toBe(2);
      expect(counter(after, 'onejob_jobs_settled_total{status="succeeded"}')).toBeGreaterThanOrEqual(2);
      expect(after).toMatch(
        /onejob_http_request_duration_seconds_count\{method="POST",route="\/v1\/jobs",status="409"\} 1/,
      );
    });
  });

  describe('backlog metrics (what workers scale on)', () => {
    // ROLE=api: no worker claims the jobs, so they stay due; the sampler is driven by hand instead of its 10 s timer.
    let t: TestApp;
    let key: string;
    beforeAll(async () => {
      t = await startTestApp({ role: 'api' });
      key = await t.key('backlog-owner');
    });
    afterAll(() => t.close());

    const post = (k: string) =>
      t
        .http()
        .post('/v1/jobs')
        .set(bearer(key))
        .set('Idempotency-Key', k)
        .send({ operation: 'summarize', input: { text: k } })
        .expect(201);

    it("counts due jobs by provider and state, gives the oldest due job's age, and says the build", async () => {
      // ROLE=api never samples by itself.
      expect((await t.http().get('/metrics').expect(200)).text).not.toMatch(/^onejob_oldest_due_job_age_seconds\{/m);
      const [a, b, c, later] = [await post('b1'), await post('b2'), await post('b3'), await post('b4')];
      // Due two minutes ago, due just now, waiting on a capped provider, and not due before tomorrow.
      await t.dataSource.query(`UPDATE jobs SET next_attempt_at = now() - interval '120 seconds' WHERE id = $1`, [
        a.body.id,
      ]);
      await t.dataSource.query(`UPDATE jobs SET next_attempt_at = now() - interval '1 second' WHERE id = $1`, [
        b.body.id,
      ]);
      await t.dataSource.query(
        `UPDATE jobs SET next_attempt_at = now() - interval '30 seconds', waiting_for = 'sim-fallback' WHERE id = $1`,
        [c.body.id],
      );
      await t.dataSource.query(`UPDATE jobs SET next_attempt_at = now() + interval '1 day' WHERE id = $1`, [
        later.body.id,
      ]);

      await t.app.get(BacklogSampler).refresh();
      const text = (await t.http().get('/metrics').expect(200)).text;
      expect(counter(text, 'onejob_jobs_due{provider="sim-primary",state="ready"}')).toBe(2);
      expect(counter(text, 'onejob_jobs_due{provider="sim-fallback",state="waiting_for_capacity"}')).toBe(1);
      const ready = counter(text, 'onejob_oldest_due_job_age_seconds{state="ready"}');
      expect(ready).toBeGreaterThanOrEqual(120);
      expect(ready).toBeLessThan(600);
      const waiting = counter(text, 'onejob_oldest_due_job_age_seconds{state="waiting_for_capacity"}');
      expect(waiting).toBeGreaterThanOrEqual(30);
      expect(waiting).toBeLessThan(120);
      expect(text).toMatch(/^onejob_build_info\{version="0\.1\.0",node="\d+\.\d+\.\d+"\} 1$/m);

      // Settled or cancelled jobs leave the backlog, and a provider with nothing due leaves the series.
      for (const job of [a, c]) await t.http().post(`/v1/jobs/${job.body.id}/cancel`).set(bearer(key)).expect(200);
      await t.app.get(BacklogSampler).refresh();
      const after = (await t.http().get('/metrics').expect(200)).text;
      expect(counter(after, 'onejob_jobs_due{provider="sim-primary",state="ready"}')).toBe(1);
      expect(after).not.toContain('onejob_jobs_due{provider="sim-fallback"');
      expect(counter(after, 'onejob_oldest_due_job_age_seconds{state="ready"}')).toBeLessThan(60);
      expect(counter(after, 'onejob_oldest_due_job_age_seconds{state="waiting_for_capacity"}')).toBe(0);
    });
  });

  describe('as separate processes', () => {
    let db: TestDatabase;
    beforeAll(async () => {
      db = await createTestDatabase();
    });
    afterAll(() => db.drop());

    it('logs one JSON line per request with its request id, method, route, status and latency, and never the API key', async () => {
      const service = await spawnService({ DATABASE_URL: db.url, LOG_LEVEL: 'info', ROLE: 'api' });
      try {
        await waitUntilReady(service);
        const secret = 'oj_this-secret-must-not-be-logged';
        const res = await fetch(`${service.baseUrl}/v1/jobs/00000000-0000-4000-8000-000000000000`, {
          headers: { 'X-Request-Id': 'trace-req-42', Authorization: `Bearer ${secret}` },
        });
        expect(res.status).toBe(401);
        expect(res.headers.get('x-request-id')).toBe('trace-req-42');
        const lines = await waitFor(
          async () =>
            service
              .output()
              .split('\n')
              .filter((l) => l.includes('trace-req-42')),
          (found) => found.length > 0,
        );
        const entry = JSON.parse(lines[0]);
        expect(entry).toMatchObject({
          requestId: 'trace-req-42',
          req: { method: 'GET' },
          route: '/v1/jobs/:id',
          status: 401,
          msg: 'request completed',
        });
        expect(typeof entry.latencyMs).toBe('number');
        expect(service.output()).not.toContain(secret);
        expect(service.output()).not.toMatch(/"url":"\/health\/ready"/); // probes are not logged
      } finally {
        service.kill('SIGTERM');
        await service.exited;
      }
    });

    it('ROLE=worker serves health and metrics only', async () => {
      const service = await spawnService({ DATABASE_URL: db.url, ROLE: 'worker' });
      try {
        await waitUntilReady(service);
        expect((await fetch(`${service.baseUrl}/health/live`)).status).toBe(200);
        expect((await fetch(`${service.baseUrl}/metrics`)).status).toBe(200);
        for (const path of ['/v1/jobs', '/v1/providers', '/docs', '/docs-json']) {
          const res = await fetch(`${service.baseUrl}${path}`);
          expect({ path, status: res.status }).toEqual({ path, status: 404 });
          expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
        }
      } finally {
        service.kill('SIGTERM');
        await service.exited;
      }
    });
  });
});
