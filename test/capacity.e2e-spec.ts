import { MetricsService } from '../src/metrics/metrics.service.js';
import { bearer, startTestApp, type TestApp } from './helpers/app.js';
import { type RawCatalog, writeCatalog } from './helpers/catalog.js';
import { waitFor } from './helpers/wait.js';

// Provider capacity in one process with simulated providers (docs/design.md#capacity). The same rules across
// several worker processes and a real HTTP provider: test/race/capacity.race-spec.ts.

type JobBody = {
  id: string;
  status: string;
  error?: { reason: string };
  attempts: Array<{ provider: string; status: string; startedAt: string | null; error?: { reason: string } | null }>;
};

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const terminal = (job: JobBody) => ['succeeded', 'failed', 'cancelled'].includes(job.status);

const CAPPED = {
  name: 'sim-capped',
  kind: 'simulated',
  model: 'c',
  timeoutMs: 3000,
  maxConcurrency: 3,
  simulate: { latencyMs: 500 },
};
const LIMITED = {
  name: 'sim-limited',
  kind: 'simulated',
  model: 'l',
  timeoutMs: 3000,
  maxAttempts: 1,
  maxDeferrals: 2,
  simulate: { latencyMs: 5, outcome: 'error', errorStatus: 429, retryAfterMs: 800 },
};
const BROKEN = {
  name: 'sim-broken',
  kind: 'simulated',
  model: 'b',
  timeoutMs: 3000,
  maxAttempts: 1,
  breaker: { failures: 2, windowMs: 10_000, cooldownMs: 1500 },
  simulate: { latencyMs: 5, outcome: 'error', errorStatus: 500 },
};

async function startService() {
  const catalogFile = writeCatalog((c: RawCatalog) => c.providers.push(CAPPED, LIMITED, BROKEN));
  const t: TestApp = await startTestApp({
    role: 'all',
    catalogFile,
    workerPollMs: 50,
    reconcileIntervalMs: 200,
    workerConcurrency: 16,
  });
  const key = await t.key('owner-capacity', ['jobs:write', 'jobs:read', 'providers:certify']);
  const s = {
    t,
    create: async (idempotencyKey: string, providers: string[]) => {
      const res = await t
        .http()
        .post('/v1/jobs')
        .set(bearer(key))
        .set('Idempotency-Key', idempotencyKey)
        .send({ operation: 'summarize', input: { text: idempotencyKey }, providers });
      expect(res.status).toBe(201);
      return res.body as JobBody;
    },
    job: async (id: string) => (await t.http().get(`/v1/jobs/${id}`).set(bearer(key))).body as JobBody,
    until: (id: string, done: (job: JobBody) => boolean, timeoutMs = 15_000) =>
      waitFor(() => s.job(id), done, timeoutMs),
    provider: async (name: string) =>
      ((await t.http().get('/v1/providers').set(bearer(key))).body as Array<{ name: string; capacity: any }>).find(
        (p) => p.name === name,
      )!.capacity,
    certify: async (name: string) => {
      const res = await t
        .http()
        .post(`/v1/providers/${name}/certifications`)
        .set(bearer(key))
        .send({ operation: 'summarize' });
      expect(res.body.passed).toBe(true);
    },
  };
  return s;
}

describe('provider capacity (one process)', () => {
  let s: Awaited<ReturnType<typeof startService>>;
  beforeAll(async () => {
    s = await startService();
  });
  afterAll(async () => {
    await s.t.close();
  });

  it('never has more than maxConcurrency calls in flight, and jobs on an uncapped provider do not queue behind them', async () => {
    const capped = await Promise.all(Array.from({ length: 15 }, (_, i) => s.create(`capped-${i}`, ['sim-capped'])));
    // Calls in flight are what the provider sees: this process's gauge (inc before the call, dec after). The
    // database's `running` count is not that: a call returns before its settlement moves the attempt on, and its
    // lease may already carry the next call.
    const metrics = s.t.app.get(MetricsService);
    const inFlight = async () =>
      (await metrics.providerInflight.get()).values.find((v) => v.labels.provider === 'sim-capped')?.value ?? 0;
    let most = 0;
    let mostLeases = 0;
    let leaseSlack = Infinity;
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        most = Math.max(most, await inFlight());
        const [row] = await s.t.dataSource.query(
          `SELECT (SELECT count(*)::int FROM provider_leases WHERE provider = 'sim-capped' AND expires_at > now()) AS leases,
                  min(extract(epoch FROM l.expires_at - a.hard_deadline_at) * 1000)::float8 AS slack
             FROM attempts a JOIN provider_leases l ON l.attempt_id = a.id
            WHERE a.provider = 'sim-capped' AND a.status = 'running'`,
        );
        mostLeases = Math.max(mostLeases, row.leases);
        // A running call's lease outlives its hard deadline (renewed by the running mark). An attempt whose call
        // has returned may still read `running` until its settlement lands, its lease already given back or
        // handed to the next attempt: only attempts that hold a lease are measured.
        if (row.slack !== null) leaseSlack = Math.min(leaseSlack, row.slack);
        await sleep(15);
      }
    })();
    await sleep(200);
    // The backlog needs 15 / 3 * 500 ms = 2.5 s; a job on another provider must not wait for it.
    const other = await s.create('uncapped', ['sim-primary']);
    const done = await s.until(other.id, terminal, 5_000);
    const capacityMidway = await s.provider('sim-capped');
    expect(done.status).toBe('succeeded');
    const stillQueued = await Promise.all(capped.map((j) => s.job(j.id)));
    expect(stillQueued.filter((j) => !terminal(j)).length).toBeGreaterThan(0);
    expect(capacityMidway).toMatchObject({ maxConcurrency: 3 });
    expect(capacityMidway.inFlight).toBeLessThanOrEqual(3);
    for (const job of capped) expect((await s.until(job.id, terminal)).status).toBe('succeeded');
    sampling = false;
    await sampler;
    expect(most).toBe(3);
    expect(mostLeases).toBeLessThanOrEqual(3);
    expect(Number.isFinite(leaseSlack)).toBe(true); // leases were seen
    expect(leaseSlack).toBeGreaterThanOrEqual(4_999);
    // Every lease is given back (the release runs beside the settlement, so it may land just after it).
    const leases = await waitFor(
      async () => (await s.t.dataSource.query(`SELECT count(*)::int AS n FROM provider_leases`))[0].n as number,
      (n) => n === 0,
      3_000,
    );
    expect(leases).toBe(0);
  });

  it("honours a 429's Retry-After for every job on the provider, without counting it against maxAttempts, up to maxDeferrals", async () => {
    const first = await s.create('limited-1', ['sim-limited']);
    const answered = await s.until(first.id, (j) => j.attempts.some((a) => a.status === 'failed'));
    const pausedAt = Date.now();
    expect(answered.attempts[0].error?.reason).toBe('rate_limited');
    expect((await s.provider('sim-limited')).pausedUntil).not.toBeNull();
    // Created during the pause: it must not call before the pause ends.
    const second = await s.create('limited-2', ['sim-limited']);
    await sleep(300);
    expect((await s.job(second.id)).attempts).toHaveLength(0);
    const done = await s.until(first.id, terminal);
    // maxAttempts is 1, yet the job was tried three times: two deferrals accepted, the third answer moved it on.
    expect(done).toMatchObject({ status: 'failed', error: { reason: 'providers_exhausted' } });
    expect(done.attempts.map((a) => a.error?.reason)).toEqual(['rate_limited', 'rate_limited', 'rate_limited']);
    const starts = done.attempts.map((a) => Date.parse(a.startedAt!));
    for (let i = 1; i < starts.length; i++) expect(starts[i] - starts[i - 1]).toBeGreaterThanOrEqual(790);
    const secondJob = await s.until(second.id, (j) => j.attempts.length > 0);
    expect(Date.parse(secondJob.attempts[0].startedAt!)).toBeGreaterThanOrEqual(pausedAt + 400);
  });

  it('opens the breaker after repeated failures: new jobs go to the certified fallback with no attempt on the sick provider, one probe after the cooldown', async () => {
    await s.certify('sim-fallback');
    for (const name of ['broken-1', 'broken-2']) {
      const job = await s.create(name, ['sim-broken', 'sim-fallback']);
      const done = await s.until(job.id, terminal);
      expect(done.attempts.map((a) => [a.provider, a.status])).toEqual([
        ['sim-broken', 'failed'],
        ['sim-fallback', 'succeeded'],
      ]);
    }
    const open = await s.provider('sim-broken');
    expect(open.breaker).toMatchObject({ state: 'open', failuresInWindow: 2 });
    const skipped = await s.until((await s.create('broken-3', ['sim-broken', 'sim-fallback'])).id, terminal);
    expect(skipped.attempts.map((a) => [a.provider, a.status])).toEqual([['sim-fallback', 'succeeded']]);
    // With no fallback, a job waits for the cooldown instead of failing.
    const alone = await s.create('broken-alone', ['sim-broken']);
    await sleep(500);
    expect((await s.job(alone.id)).attempts).toHaveLength(0);
    // After the cooldown exactly one probe goes; it fails, and the breaker opens again for another cooldown.
    const probed = await s.until(alone.id, terminal, 5_000);
    expect(probed.attempts.map((a) => a.provider)).toEqual(['sim-broken']);
    const reopened = await s.provider('sim-broken');
    expect(reopened.breaker.state).toBe('open');
    expect(Date.parse(reopened.breaker.since)).toBeGreaterThan(Date.parse(open.breaker.since));
    const metrics = (await s.t.http().get('/metrics')).text;
    expect(metrics).toMatch(/onejob_provider_breaker_state\{provider="sim-broken"\} 2/);
    expect(metrics).toMatch(/onejob_provider_throttled_total\{provider="sim-limited",reason="rate_limited"\} [1-9]/);
  });
});
