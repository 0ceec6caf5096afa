import { MetricsService } from '../src/metrics/metrics.service.js';
import { bearer, startTestApp } from './helpers/app.js';
import { provider, type RawCatalog, writeCatalog } from './helpers/catalog.js';
import { sleep, waitFor } from './helpers/wait.js';

type JobBody = {
  id: string;
  status: string;
  version: number;
  result: unknown;
  completedBy: string | null;
  attempts: Array<Record<string, any>>;
};

/** A running service (API, workers, reconciler) on its own database with a catalog variant. */
async function startService(mutate: (catalog: RawCatalog) => void = () => undefined, reconcileIntervalMs = 100) {
  const t = await startTestApp({
    role: 'all',
    catalogFile: writeCatalog(mutate),
    workerPollMs: 10,
    reconcileIntervalMs,
    workerConcurrency: 8,
  });
  const key = await t.key('owner-attempts');
  const api = {
    t,
    key,
    create: async (idempotencyKey: string, providers?: string[], text = 'The quick brown fox.') => {
      const res = await t
        .http()
        .post('/v1/jobs')
        .set(bearer(key))
        .set('Idempotency-Key', idempotencyKey)
        .send({ operation: 'summarize', input: { text }, ...(providers ? { providers } : {}) });
      expect(res.status).toBe(201);
      return res.body as JobBody;
    },
    job: async (id: string) => (await t.http().get(`/v1/jobs/${id}`).set(bearer(key))).body as JobBody,
    until: (id: string, done: (job: JobBody) => boolean, timeoutMs = 10_000) =>
      waitFor(() => api.job(id), done, timeoutMs),
    certify: async (name: string) => {
      const res = await t
        .http()
        .post(`/v1/providers/${name}/certifications`)
        .set(bearer(key))
        .send({ operation: 'summarize' });
      expect(res.body.passed).toBe(true);
    },
    events: (jobId: string) =>
      t.dataSource.query(
        'SELECT subject, attempt_id, from_status, to_status, reason, detail FROM job_events WHERE job_id = $1 ORDER BY id',
        [jobId],
      ) as Promise<
        Array<{
          subject: string;
          attempt_id: string | null;
          from_status: string | null;
          to_status: string;
          reason: string;
          detail: any;
        }>
      >,
  };
  return api;
}

const terminal = (job: JobBody) => ['succeeded', 'failed', 'cancelled'].includes(job.status);

describe('the four seed cases: the contract with the rest of the system', () => {
  it('1. double click: 50 concurrent POSTs with one key give one job id, and exactly one attempt runs', async () => {
    const s = await startService();
    try {
      const responses = await Promise.all(
        Array.from({ length: 50 }, () =>
          s.t
            .http()
            .post('/v1/jobs')
            .set(bearer(s.key))
            .set('Idempotency-Key', 'click')
            .send({ operation: 'summarize', input: { text: 'once' } }),
        ),
      );
      expect(new Set(responses.map((r) => r.body.id)).size).toBe(1);
      expect(responses.every((r) => r.status === 201 || r.status === 200)).toBe(true);
      const job = await s.until(responses[0].body.id, terminal);
      expect(job.status).toBe('succeeded');
      expect(job.attempts).toHaveLength(1);
      await sleep(300); // workers keep polling: still one attempt
      const rows = await s.t.dataSource.query(
        'SELECT (SELECT count(*) FROM jobs)::int AS jobs, (SELECT count(*) FROM attempts)::int AS attempts',
      );
      expect(rows[0]).toEqual({ jobs: 1, attempts: 1 });
    } finally {
      await s.t.close();
    }
  });

  it('2. same key, other input: 409, and the existing job is not returned as if it matched', async () => {
    const s = await startService();
    try {
      const first = await s.create('same-key');
      const res = await s.t
        .http()
        .post('/v1/jobs')
        .set(bearer(s.key))
        .set('Idempotency-Key', 'same-key')
        .send({ operation: 'summarize', input: { text: 'other' } });
      expect(res.status).toBe(409);
      expect(res.body.code).toBe('idempotency_key_reused');
      expect(res.body.id).toBeUndefined();
      expect(res.headers.location).toBeUndefined();
      expect((await s.job(first.id)).attempts.length).toBeLessThanOrEqual(1);
    } finally {
      await s.t.close();
    }
  });

  describe('3. provoked timeout', () => {
    let s: Awaited<ReturnType<typeof startService>>;
    beforeAll(async () => {
      // What this case proves is the worker's own deadline timer (the reconciler's path for a worker that vanished
      // is test/process-faults.e2e-spec.ts): a reconciler pass every 100 ms could notice the deadline first on a
      // loaded machine, so it is all but off here.
      s = await startService(undefined, 60_000);
      await s.certify('sim-fallback');
    });
    afterAll(() => s.t.close());

    it('leaves the attempt and the job unknown, not failed, and blocks every further attempt until an operator resolves it', async () => {
      const created = await s.create('hang-1', ['sim-hang', 'sim-fallback']);
      const unknown = await s.until(created.id, (j) => j.status === 'unknown');
      expect(unknown.attempts).toHaveLength(1);
      expect(unknown.attempts[0]).toMatchObject({ provider: 'sim-hang', status: 'unknown', outcome: null });

      const again = await s.t.http().post(`/v1/jobs/${created.id}/attempts`).set(bearer(s.key)).send({});
      expect(again.status).toBe(409);
      expect(again.body.code).toBe('attempt_in_progress');

      // Past the hard timeout and several reconciler passes: still one attempt, still unknown.
      await sleep(1500);
      const held = await s.job(created.id);
      expect(held.status).toBe('unknown');
      expect(held.attempts.map((a) => a.status)).toEqual(['unknown']);

      const resolved = await s.t
        .http()
        .post(`/v1/attempts/${held.attempts[0].id}/resolve`)
        .set(bearer(s.key))
        .send({ status: 'cancelled', reason: 'operator: provider confirmed the request was dropped' });
      expect(resolved.status).toBe(200);
      const done = await s.until(created.id, terminal);
      expect(done.status).toBe('succeeded');
      expect(done.attempts.map((a) => [a.provider, a.status, a.outcome])).toEqual([
        ['sim-hang', 'cancelled', null],
        ['sim-fallback', 'succeeded', 'won'],
      ]);
      const reasons = (await s.events(created.id)).map(
        (e) => `${e.subject}:${e.from_status}->${e.to_status}:${e.reason}`,
      );
      expect(reasons).toContain('attempt:running->unknown:deadline_passed');
      expect(reasons).toContain('job:running->unknown:deadline_passed');
      expect(reasons).toContain('attempt:unknown->cancelled:resolved_by_operator');
      expect(reasons.some((r) => r.startsWith('attempt:') && r.includes('->failed'))).toBe(false);
    });

    it('stops waiting when the owner cancels the job instead: no further attempt starts', async () => {
      const created = await s.create('hang-2', ['sim-hang', 'sim-fallback']);
      await s.until(created.id, (j) => j.status === 'unknown');
      const cancelled = await s.t.http().post(`/v1/jobs/${created.id}/cancel`).set(bearer(s.key));
      expect(cancelled.status).toBe(200);
      expect(cancelled.body).toMatchObject({ status: 'cancelled', version: 1 });
      await sleep(1500);
      const after = await s.job(created.id);
      expect(after.attempts).toHaveLength(1);
      expect(after.status).toBe('cancelled');
      const again = await s.t.http().post(`/v1/jobs/${created.id}/attempts`).set(bearer(s.key)).send({});
      expect(again.status).toBe(409);
      expect(again.body.code).toBe('job_terminal');
    });

    it('refuses to resolve an attempt that is not unknown', async () => {
      const created = await s.create('quick-1');
      const done = await s.until(created.id, terminal);
      const res = await s.t
        .http()
        .post(`/v1/attempts/${done.attempts[0].id}/resolve`)
        .set(bearer(s.key))
        .send({ status: 'failed', reason: 'x' });
      expect(res.status).toBe(409);
      expect(res.body.code).toBe('attempt_not_unknown');
    });
  });

  it('4. reverse-order completion: the fallback sent second and back first wins; the late primary is discarded', async () => {
    const s = await startService((c) => {
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
      c.providers.push({
        name: 'fast-b',
        kind: 'simulated',
        model: 'b',
        timeoutMs: 2000,
        simulate: { latencyMs: 100 },
      });
    });
    try {
      await s.certify('fast-b');
      const created = await s.create('reverse', ['slow-a', 'fast-b']);
      const won = await s.until(created.id, terminal);
      expect(won.status).toBe('succeeded');
      const [a, b] = won.attempts;
      expect(a.provider).toBe('slow-a');
      expect(b.provider).toBe('fast-b');
      expect(new Date(a.startedAt).getTime()).toBeLessThan(new Date(b.startedAt).getTime());
      expect(won.completedBy).toBe(b.id);
      expect(won.version).toBe(1);
      expect(JSON.stringify(won.result)).toContain('b: Summarize');

      // A's answer arrives at 1.5 s, after B won: zero rows change, A records `discarded` with a digest.
      const settled = await s.until(created.id, (j) => j.attempts[0].outcome !== null, 5000);
      expect(settled.attempts[0]).toMatchObject({ status: 'succeeded', outcome: 'discarded' });
      expect(settled.attempts[0].resultDigest).toMatch(/^[0-9a-f]{64}$/);
      expect(settled).toMatchObject({ status: 'succeeded', version: 1, completedBy: b.id, result: won.result });
      const discarded = (await s.events(created.id)).find((e) => e.reason === 'result_discarded');
      expect(discarded).toMatchObject({ attempt_id: a.id, to_status: 'succeeded' });
      expect(discarded!.detail).toMatchObject({ readVersion: 0, jobVersion: 1, winner: b.id });
      const stored = await s.t.dataSource.query(
        `SELECT count(*)::int AS n FROM job_events WHERE detail::text LIKE '%a: Summarize%'`,
      );
      expect(stored[0].n).toBe(0); // the loser's payload is written nowhere
      const metrics = await s.t.http().get('/metrics');
      expect(metrics.text).toMatch(/onejob_settlement_races_total\{provider="slow-a"\} 1/);
    } finally {
      await s.t.close();
    }
  });

  it('4. mirror: the primary back first wins although the fallback was sent later', async () => {
    const s = await startService((c) => {
      // slow-a answers 1.3 s after its soft deadline: time for the failover to be claimed and sent on a loaded
      // machine (with 400 ms it once was not, under the full suite), and still long before slower-b answers.
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
      c.providers.push({
        name: 'slower-b',
        kind: 'simulated',
        model: 'b',
        timeoutMs: 5000,
        simulate: { latencyMs: 3000 },
      });
    });
    try {
      await s.certify('slower-b');
      const created = await s.create('mirror', ['slow-a', 'slower-b']);
      const won = await s.until(created.id, terminal);
      const [a, b] = won.attempts;
      expect(won.completedBy).toBe(a.id);
      expect(a).toMatchObject({ provider: 'slow-a', status: 'succeeded', outcome: 'won' });
      expect(JSON.stringify(won.result)).toContain('a: Summarize');
      const settled = await s.until(created.id, (j) => j.attempts[1]?.outcome !== null, 5000);
      expect(settled.attempts[1]).toMatchObject({
        id: b.id,
        provider: 'slower-b',
        status: 'succeeded',
        outcome: 'discarded',
      });
      expect(settled).toMatchObject({ version: 1, completedBy: a.id, result: won.result });
    } finally {
      await s.t.close();
    }
  });
});

describe('attempts beyond the seed cases', () => {
  it('keeps WORKER_CONCURRENCY calls in flight, never more, while outcomes are recorded behind them', async () => {
    const s = await startService((c) => (provider(c, 'sim-primary').simulate.latencyMs = 300));
    try {
      // This process's gauge counts calls to the provider (up before the call, down when it returns).
      const metrics = s.t.app.get(MetricsService);
      const inFlight = async () =>
        (await metrics.providerInflight.get()).values.find((v) => v.labels.provider === 'sim-primary')?.value ?? 0;
      let most = 0;
      let sampling = true;
      const sampler = (async () => {
        while (sampling) {
          most = Math.max(most, await inFlight());
          await sleep(5);
        }
      })();
      const jobs = await Promise.all(Array.from({ length: 40 }, (_, i) => s.create(`window-${i}`)));
      const done = await Promise.all(jobs.map((job) => s.until(job.id, (j) => j.status === 'succeeded', 20_000)));
      sampling = false;
      await sampler;
      // The window of 8 (startService) is filled, and a call's slot frees only when it returns.
      expect(most).toBe(8);
      expect(done.map((j) => j.attempts.length)).toEqual(done.map(() => 1));
    } finally {
      await s.t.close();
    }
  });

  it('discards the later result of an attempt in flight when the job is cancelled', async () => {
    const s = await startService((c) => (provider(c, 'sim-primary').simulate.latencyMs = 800));
    try {
      const created = await s.create('cancel-in-flight');
      await s.until(created.id, (j) => j.attempts[0]?.status === 'running');
      const cancelled = await s.t.http().post(`/v1/jobs/${created.id}/cancel`).set(bearer(s.key));
      expect(cancelled.body).toMatchObject({ status: 'cancelled', version: 1 });
      const after = await s.until(created.id, (j) => j.attempts[0].outcome !== null, 5000);
      expect(after).toMatchObject({ status: 'cancelled', version: 1, result: null, completedBy: null });
      expect(after.attempts[0]).toMatchObject({ status: 'succeeded', outcome: 'discarded' });
      const again = await s.t.http().post(`/v1/jobs/${created.id}/cancel`).set(bearer(s.key));
      expect(again.status).toBe(409);
      expect(again.body.code).toBe('job_terminal');
    } finally {
      await s.t.close();
    }
  });

  it('never switches to a fallback that is not certified: a failover provider holds unknown instead', async () => {
    const s = await startService((c) => {
      c.providers.push({
        name: 'hang-failover',
        kind: 'simulated',
        model: 'h',
        timeoutMs: 200,
        hardTimeoutMs: 600,
        onTimeout: 'failover',
        sideEffectFree: true,
        simulate: { outcome: 'timeout' },
      });
    });
    try {
      const created = await s.create('uncertified', ['hang-failover', 'sim-fallback']);
      await s.until(created.id, (j) => j.status === 'unknown');
      await sleep(1000);
      const held = await s.job(created.id);
      expect(held.status).toBe('unknown');
      expect(held.attempts.map((a) => [a.provider, a.status])).toEqual([['hang-failover', 'unknown']]);
    } finally {
      await s.t.close();
    }
  });

  it('settles failed when the primary fails definitively and the fallback is not certified', async () => {
    const s = await startService();
    try {
      const created = await s.create('no-fallback', ['sim-400', 'sim-fallback']);
      const done = await s.until(created.id, terminal);
      expect(done).toMatchObject({ status: 'failed', version: 1, completedBy: null });
      expect(done.attempts.map((a) => [a.provider, a.status])).toEqual([['sim-400', 'failed']]);
      expect((done as any).error.reason).toBe('providers_exhausted');
    } finally {
      await s.t.close();
    }
  });

  it('retries a retryable failure on the same provider up to maxAttempts, then moves to the certified fallback', async () => {
    const s = await startService();
    try {
      await s.certify('sim-fallback');
      const created = await s.create('retry', ['sim-503', 'sim-fallback']);
      const done = await s.until(created.id, terminal);
      expect(done.status).toBe('succeeded');
      expect(done.attempts.map((a) => [a.provider, a.status, a.error?.status ?? null])).toEqual([
        ['sim-503', 'failed', 503],
        ['sim-503', 'failed', 503],
        ['sim-fallback', 'succeeded', null],
      ]);
    } finally {
      await s.t.close();
    }
  });

  it('fails an attempt whose output breaks the contract with contract_violation, never settling with it', async () => {
    const s = await startService();
    try {
      const created = await s.create('contract', ['sim-invalid']);
      const done = await s.until(created.id, terminal);
      expect(done).toMatchObject({ status: 'failed', result: null });
      expect(done.attempts[0]).toMatchObject({
        status: 'failed',
        error: { reason: 'contract_violation', retryable: false },
      });
    } finally {
      await s.t.close();
    }
  });

  it('holds the answer with Prefer: wait until the job is terminal', async () => {
    const s = await startService();
    try {
      const res = await s.t
        .http()
        .post('/v1/jobs')
        .set(bearer(s.key))
        .set('Idempotency-Key', 'wait')
        .set('Prefer', 'wait=5')
        .send({ operation: 'summarize', input: { text: 'w' } });
      expect(res.status).toBe(201);
      expect(res.headers['preference-applied']).toBe('wait=5');
      expect(res.body.status).toBe('succeeded');
      const replay = await s.t
        .http()
        .post('/v1/jobs')
        .set(bearer(s.key))
        .set('Idempotency-Key', 'wait')
        .set('Prefer', 'wait=5')
        .send({ operation: 'summarize', input: { text: 'w' } });
      expect(replay.status).toBe(200);
      expect(replay.body.status).toBe('succeeded');
    } finally {
      await s.t.close();
    }
  });
});
