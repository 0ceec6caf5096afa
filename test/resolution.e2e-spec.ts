import { MetricsService } from '../src/metrics/metrics.service.js';
import { CertificationService } from '../src/providers/certification.service.js';
import { createAttempt, createJob } from './factories/index.js';
import { FakeOpenAiServer } from './fakes/fake-openai.server.js';
import { bearer, startTestApp, type TestApp } from './helpers/app.js';
import { provider, writeCatalog } from './helpers/catalog.js';
import { sleep, waitFor } from './helpers/wait.js';

// Unknown attempts resolved at the provider (docs/design.md#resolution-at-the-provider): OpenAI's Responses API in
// background mode, the fake written from the API reference and called through the official SDK (maxRetries 0).

type AttemptBody = {
  id: string;
  provider: string;
  status: string;
  outcome: string | null;
  error: { reason: string; message: string } | null;
  providerRequestId: string | null;
  providerStatus: string | null;
  resolvedBy: string | null;
  resultDigest: string | null;
  deadlineAt: string;
  finishedAt: string | null;
};
type JobBody = {
  id: string;
  status: string;
  version: number;
  completedBy: string | null;
  attempts: AttemptBody[];
  cost: Array<{ currency: string; total: number; discarded: number }>;
};
type EventRow = {
  id: string;
  attempt_id: string | null;
  subject: string;
  from_status: string | null;
  to_status: string;
  reason: string;
};

const RECONCILE_MS = 500;
const TIMEOUT_MS = 1000;
const ANSWER_MS = 3000;
// The bench case runs 200 (npm run bench -- --cases resolution); here fewer, the test process being the service,
// the fake and the client at once.
const JOBS = Number(process.env.RESOLUTION_JOBS ?? 25);

const responsesProvider = (name: string, baseUrl: string, more: object = {}) => ({
  name,
  kind: 'openai',
  api: 'responses',
  model: 'gpt-4o-mini',
  baseUrl,
  apiKeyEnv: 'FAKE_OPENAI_KEY',
  timeoutMs: TIMEOUT_MS,
  hardTimeoutMs: 5000,
  // The worker follows the response once a second: the answers come past the deadline, the look-ups are the subject.
  pollIntervalMs: 1000,
  maxAttempts: 1,
  ...more,
});

describe('unknown attempts resolved at the provider (OpenAI Responses, background mode)', () => {
  let fake: FakeOpenAiServer;
  let t: TestApp;
  let key: string;

  beforeAll(async () => {
    process.env.FAKE_OPENAI_KEY = 'sk-fake';
    fake = await new FakeOpenAiServer().start();
    const catalogFile = writeCatalog((c) => {
      // Priced (a dollar a token), so that a paid result lost after a cancel shows as a missing cost.
      const pricing = { inputPerMTok: 1_000_000, outputPerMTok: 1_000_000, currency: 'USD' };
      c.providers.push(responsesProvider('oa-hold', fake.url, { pricing }));
      c.providers.push(responsesProvider('oa-failover', fake.url, { onTimeout: 'failover', sideEffectFree: true }));
      c.providers.push(
        responsesProvider('oa-priced', fake.url, { onTimeout: 'failover', sideEffectFree: true, pricing }),
      );
      // A fallback certified only when a test says so.
      c.providers.push({ ...provider(c, 'sim-fallback'), name: 'sim-late', model: 'sim-late' });
      // Certified against the fake: it answers past timeoutMs, within hardTimeoutMs.
      c.providers.push(responsesProvider('oa-cert', fake.url, { hardTimeoutMs: 4000, pollIntervalMs: 250 }));
      // Followed by its worker for 20 s: an owner's cancel comes while the attempt is running.
      c.providers.push(responsesProvider('oa-long', fake.url, { timeoutMs: 20_000, hardTimeoutMs: 30_000, pricing }));
      // Chat Completions with store: true, on a deadline shorter than the answer: found again by its metadata.
      c.providers.push({
        ...responsesProvider('oa-stored', fake.url, { timeoutMs: 500, hardTimeoutMs: 1000 }),
        api: 'chat',
        store: true,
        pollIntervalMs: undefined,
      });
    });
    t = await startTestApp({
      role: 'all',
      catalogFile,
      workerConcurrency: 64,
      workerPollMs: 20,
      reconcileIntervalMs: RECONCILE_MS,
      dbPoolSize: 20,
    });
    key = await t.key('owner-resolution');
    const certified = await t
      .http()
      .post('/v1/providers/sim-fallback/certifications')
      .set(bearer(key))
      .send({ operation: 'summarize' });
    expect(certified.status).toBe(201);
  });
  afterAll(async () => {
    await t?.close();
    await fake?.stop();
  });
  beforeEach(() => fake.reset());

  const create = async (providers: string[]) => {
    const res = await t
      .http()
      .post('/v1/jobs')
      .set(bearer(key))
      .set('Idempotency-Key', `k-${Math.random()}`)
      .send({ operation: 'summarize', input: { text: `job ${Math.random()}` }, providers });
    expect(res.status).toBe(201);
    return res.body as JobBody;
  };
  /** `count` jobs, created ten at a time (the jobs arrive together, the pool is not the test's subject). */
  const createMany = async (count: number, providers: string[]) => {
    const jobs: JobBody[] = [];
    while (jobs.length < count) {
      jobs.push(
        ...(await Promise.all(Array.from({ length: Math.min(10, count - jobs.length) }, () => create(providers)))),
      );
    }
    return jobs;
  };
  const job = async (id: string) => (await t.http().get(`/v1/jobs/${id}`).set(bearer(key))).body as JobBody;
  const allTerminal = (ids: string[], timeoutMs: number) =>
    waitFor(
      () => Promise.all(ids.map(job)),
      (jobs) => jobs.every((j) => ['succeeded', 'failed', 'cancelled'].includes(j.status)),
      timeoutMs,
      100,
    );
  const events = (jobId: string): Promise<EventRow[]> =>
    t.dataSource.query(
      'SELECT id, attempt_id, subject, from_status, to_status, reason FROM job_events WHERE job_id = $1 ORDER BY id',
      [jobId],
    );
  /** What `/v1/usage` says this month's attempts on `provider` cost. */
  const usageOf = async (provider: string) => {
    const res = await t.http().get('/v1/usage?groupBy=provider').set(bearer(key));
    expect(res.status).toBe(200);
    return (res.body.groups as Array<{ key: string; cost: number }>)
      .filter((g) => g.key === provider)
      .reduce((sum, g) => sum + g.cost, 0);
  };
  const resolvedBy = async (by: string) =>
    (await t.app.get(MetricsService).unknownResolved.get()).values.find((v) => v.labels.by === by)?.value ?? 0;

  it(`hold: ${JOBS} unknown attempts are each resolved by one look-up within the answer time plus a period, no operator`, async () => {
    fake.alwaysBackground({ afterMs: ANSWER_MS, content: { summary: 'from the provider' } });
    const byProvider = await resolvedBy('provider');
    const jobs = await createMany(JOBS, ['oa-hold']);
    const done = await allTerminal(
      jobs.map((j) => j.id),
      ANSWER_MS + 20_000,
    );
    for (const settled of done) {
      expect(settled).toMatchObject({ status: 'succeeded', version: 1 });
      expect(settled.attempts).toHaveLength(1);
      const [attempt] = settled.attempts;
      const stored = fake.responseOf(attempt.id)!;
      expect(attempt).toMatchObject({
        status: 'succeeded',
        outcome: 'won',
        resolvedBy: 'provider',
        providerStatus: 'completed',
        providerRequestId: stored.id,
      });
      expect(settled.completedBy).toBe(attempt.id);
      // Within the answer time plus one reconcile period (and the slack a loaded machine needs to run a pass).
      const answeredAt = stored.createdAt + ANSWER_MS;
      expect(Date.parse(attempt.finishedAt!) - answeredAt).toBeLessThan(RECONCILE_MS + 1500);
      // The id was committed as the create call returned (usually before the deadline: under load the create
      // itself can take longer), the attempt was unknown, the look-up settled it, and the job settled once.
      const timeline = await events(settled.id);
      const idAt = timeline.findIndex((e) => e.reason === 'provider_request_created');
      const unknownAt = timeline.findIndex((e) => e.subject === 'attempt' && e.to_status === 'unknown');
      const wonAt = timeline.findIndex((e) => e.subject === 'attempt' && e.reason === 'result_won');
      expect(idAt).toBeGreaterThanOrEqual(0);
      expect(unknownAt).toBeGreaterThanOrEqual(0);
      expect(wonAt).toBeGreaterThan(Math.max(idAt, unknownAt));
      expect(timeline.filter((e) => e.subject === 'job' && e.to_status === 'succeeded')).toHaveLength(1);
      // Bounded look-ups: at most one per attempt per (0.9 of a) period while it was unknown. Counted over the
      // span, not gap by gap: a look-up is claimed on the period, and reaches the provider a little later or sooner.
      const deadline = Date.parse(attempt.deadlineAt);
      const lookups = stored.retrieves.filter((at) => at >= deadline).length;
      expect(lookups).toBeGreaterThanOrEqual(1);
      expect(lookups).toBeLessThanOrEqual(
        Math.floor((Date.parse(attempt.finishedAt!) - deadline) / (RECONCILE_MS * 0.9)) + 2,
      );
    }
    expect(fake.counters.creates).toBe(JOBS);
    expect(fake.counters.cancels).toBe(0);
    expect((await resolvedBy('provider')) - byProvider).toBe(JOBS);
    // None for settled attempts: two more periods, and not one more retrieve.
    const retrieves = fake.counters.retrieves;
    await sleep(RECONCILE_MS * 2.5);
    expect(fake.counters.retrieves).toBe(retrieves);
  }, 60_000);

  it(`failover: ${JOBS} primaries are cancelled at the provider and the certified fallback's results win`, async () => {
    fake.alwaysBackground({ afterMs: ANSWER_MS });
    const jobs = await createMany(JOBS, ['oa-failover', 'sim-fallback']);
    const done = await allTerminal(
      jobs.map((j) => j.id),
      20_000,
    );
    for (const settled of done) {
      expect(settled).toMatchObject({ status: 'succeeded', version: 1 });
      const [primary, fallback] = settled.attempts;
      expect(settled.completedBy).toBe(fallback.id);
      expect(fallback).toMatchObject({ provider: 'sim-fallback', status: 'succeeded', outcome: 'won' });
      expect(primary).toMatchObject({ provider: 'oa-failover', status: 'cancelled', resolvedBy: 'deadline' });
    }
    // Cancelled at the provider by the reconciler's look-ups, within a period of the failover, and once each.
    await waitFor(
      () => Promise.all(jobs.map((j) => job(j.id))),
      (all) => all.every((j) => j.attempts[0].providerStatus === 'cancelled'),
      RECONCILE_MS * 2 + 5000,
      100,
    );
    for (const { attempts } of done) expect(fake.responseOf(attempts[0].id)!.cancels).toBe(1);
    expect(fake.counters.cancels).toBe(JOBS);
    // Cancelled responses are never retrieved again.
    const retrieves = fake.counters.retrieves;
    await sleep(RECONCILE_MS * 2.5);
    expect(fake.counters.retrieves).toBe(retrieves);
  }, 60_000);

  it('failover: a primary that completes after all (the cancel came too late) is discarded under I5 and recorded', async () => {
    fake.alwaysBackground({ afterMs: ANSWER_MS, ignoreCancel: true, content: { summary: 'late primary' } });
    const jobs = await createMany(5, ['oa-failover', 'sim-fallback']);
    await allTerminal(
      jobs.map((j) => j.id),
      20_000,
    );
    const done = await waitFor(
      () => Promise.all(jobs.map((j) => job(j.id))),
      (all) => all.every((j) => j.attempts[0].outcome !== null),
      ANSWER_MS + 10_000,
      100,
    );
    for (const settled of done) {
      const [primary, fallback] = settled.attempts;
      expect(settled).toMatchObject({ status: 'succeeded', version: 1, completedBy: fallback.id });
      // `cancelled` -> `succeeded` when a result arrives after all (docs/design.md#5-states), and it lost.
      expect(primary).toMatchObject({ status: 'succeeded', outcome: 'discarded', providerStatus: 'completed' });
      expect(primary.resultDigest).toMatch(/^[0-9a-f]{64}$/);
      const timeline = await events(settled.id);
      expect(timeline.filter((e) => e.attempt_id === primary.id && e.reason === 'result_discarded')).toHaveLength(1);
      expect(timeline.filter((e) => e.subject === 'job' && e.to_status === 'succeeded')).toHaveLength(1);
    }
  }, 60_000);

  it('failover: a cancel answered with the response completed is a result: it competes, and its cost is counted', async () => {
    fake.alwaysBackground({ afterMs: 60_000, endOnCancel: true, content: { summary: 'done as the cancel came' } });
    const usageBefore = await usageOf('oa-priced');
    const jobs = await createMany(5, ['oa-priced', 'sim-fallback']);
    // Settled, and every primary given an outcome by the cancel's answer (no look-up follows: nothing is pending).
    const done = await waitFor(
      () => Promise.all(jobs.map((j) => job(j.id))),
      (all) => all.every((j) => j.status === 'succeeded' && j.attempts[0]?.outcome != null),
      15_000,
      100,
    );
    for (const settled of done) {
      const [primary] = settled.attempts;
      expect(fake.responseOf(primary.id)!.cancels).toBe(1);
      // `cancelled` -> `succeeded` (docs/design.md#5-states): it won if it was first, else it was discarded.
      expect(primary).toMatchObject({ provider: 'oa-priced', status: 'succeeded', providerStatus: 'completed' });
      expect(['won', 'discarded']).toContain(primary.outcome);
      expect(settled.attempts.filter((a) => a.outcome === 'won')).toHaveLength(1);
      expect(settled.completedBy).toBe(settled.attempts.find((a) => a.outcome === 'won')!.id);
      // 17 prompt and 5 completion tokens at 1 USD a token: 22 USD, on the job.
      expect(settled.cost).toEqual([
        { currency: 'USD', total: 22, discarded: primary.outcome === 'discarded' ? 22 : 0 },
      ]);
    }
    expect((await usageOf('oa-priced')) - usageBefore).toBe(5 * 22);
  }, 30_000);

  it('failover: a cancel answered with an output that breaks the contract still leaves its cost on the job', async () => {
    fake.alwaysBackground({ afterMs: 60_000, endOnCancel: true, content: { nope: 'not a summary' } });
    const usageBefore = await usageOf('oa-priced');
    const [created] = await createMany(1, ['oa-priced', 'sim-fallback']);
    const settled = await waitFor(
      () => job(created.id),
      (j) => j.status === 'succeeded' && j.attempts[0]?.providerStatus === 'completed',
      15_000,
      100,
    );
    const [primary, fallback] = settled.attempts;
    expect(settled.completedBy).toBe(fallback.id);
    // Given up by failover, so not failed: the provider's answer is recorded on it, with what it was billed.
    expect(primary).toMatchObject({
      status: 'cancelled',
      outcome: null,
      usage: { promptTokens: 17, completionTokens: 5 },
    });
    expect(settled.cost).toEqual([{ currency: 'USD', total: 22, discarded: 0 }]);
    expect((await events(settled.id)).map((e) => e.reason)).toContain('late_failure_ignored');
    expect((await usageOf('oa-priced')) - usageBefore).toBe(22);
  }, 30_000);

  /** The job's first attempt once it carries the provider's id (the create call returned). */
  const submitted = (id: string, status = 'running') =>
    waitFor(
      () => job(id),
      (j) => j.attempts[0]?.providerRequestId != null && j.attempts[0].status === status,
      15_000,
      50,
    );

  it('owner cancel: running responses are cancelled at the provider, and one that completed as the cancel came is discarded with its cost', async () => {
    fake.background({ afterMs: 60_000 }, { afterMs: 60_000, endOnCancel: true });
    const usageBefore = await usageOf('oa-long');
    const stopped = await create(['oa-long']);
    const late = await create(['oa-long']);
    await submitted(stopped.id);
    await submitted(late.id);
    for (const j of [stopped, late]) {
      expect((await t.http().post(`/v1/jobs/${j.id}/cancel`).set(bearer(key))).status).toBe(200);
    }
    // Within a period or two: the worker follows until its deadline at 20 s, so nothing but the cancel ends them.
    const [a, b] = await waitFor(
      () => Promise.all([job(stopped.id), job(late.id)]),
      (both) => both.every((j) => j.attempts[0].providerStatus !== 'in_progress' && j.attempts[0].finishedAt),
      RECONCILE_MS * 2 + 5000,
      100,
    );
    expect(fake.responseOf(a.attempts[0].id)!.cancels).toBe(1);
    expect(a).toMatchObject({ status: 'cancelled', version: 1 });
    expect(a.attempts[0]).toMatchObject({
      status: 'failed',
      providerStatus: 'cancelled',
      error: { reason: 'response_cancelled' },
    });
    expect(fake.responseOf(b.attempts[0].id)!.cancels).toBe(1);
    expect(b).toMatchObject({ status: 'cancelled', version: 1, completedBy: null });
    expect(b.attempts[0]).toMatchObject({ status: 'succeeded', outcome: 'discarded', providerStatus: 'completed' });
    expect(b.cost).toEqual([{ currency: 'USD', total: 22, discarded: 22 }]);
    expect((await usageOf('oa-long')) - usageBefore).toBe(22);
  }, 30_000);

  it('owner cancel of an unknown attempt: the reconciler lets it go and cancels its response at the provider', async () => {
    fake.alwaysBackground({ afterMs: 60_000 });
    const held = await create(['oa-hold']);
    await submitted(held.id, 'unknown');
    expect((await t.http().post(`/v1/jobs/${held.id}/cancel`).set(bearer(key))).status).toBe(200);
    const done = await waitFor(
      () => job(held.id),
      (j) => j.attempts[0].providerStatus === 'cancelled',
      RECONCILE_MS * 2 + 5000,
      100,
    );
    expect(fake.responseOf(done.attempts[0].id)!.cancels).toBe(1);
    // Let go by the housekeeping (`cancelled`, abandoned) or, when the look-up came first, ended by what the
    // provider said (`failed`, response_cancelled): either way it no longer holds the job, and the response is over.
    const [attempt] = done.attempts;
    const reasons = (await events(held.id)).filter((e) => e.attempt_id === attempt.id).map((e) => e.reason);
    if (attempt.status === 'cancelled') expect(reasons).toContain('abandoned_job_finished');
    else {
      expect(attempt).toMatchObject({
        status: 'failed',
        resolvedBy: 'provider',
        error: { reason: 'response_cancelled' },
      });
    }
  }, 30_000);

  it('operator failed: the response is cancelled at the provider, and one that had completed is discarded with its cost', async () => {
    fake.background({ afterMs: 60_000 }, { afterMs: 60_000, endOnCancel: true });
    const usageBefore = await usageOf('oa-hold');
    const stopped = await create(['oa-hold']);
    const late = await create(['oa-hold']);
    for (const j of [stopped, late]) {
      const seen = await submitted(j.id, 'unknown');
      const res = await t
        .http()
        .post(`/v1/attempts/${seen.attempts[0].id}/resolve`)
        .set(bearer(key))
        .send({ status: 'failed', reason: 'given up by hand' });
      expect(res.status).toBe(200);
    }
    const [a, b] = await waitFor(
      () => Promise.all([job(stopped.id), job(late.id)]),
      (both) => both.every((j) => ['cancelled', 'completed'].includes(j.attempts[0].providerStatus!)),
      RECONCILE_MS * 2 + 5000,
      100,
    );
    for (const j of [a, b]) {
      expect(j.status).toBe('failed');
      expect(fake.responseOf(j.attempts[0].id)!.cancels).toBe(1);
      // The operator's word stays: failed, resolved by the operator, the provider's answer recorded beside it.
      expect(j.attempts[0]).toMatchObject({
        status: 'failed',
        resolvedBy: 'operator',
        error: { reason: 'resolved_by_operator' },
      });
    }
    expect(a.attempts[0]).toMatchObject({ providerStatus: 'cancelled', outcome: null });
    expect(b.attempts[0]).toMatchObject({ providerStatus: 'completed', outcome: 'discarded' });
    expect(b.cost).toEqual([{ currency: 'USD', total: 22, discarded: 22 }]);
    expect((await usageOf('oa-hold')) - usageBefore).toBe(22);
  }, 30_000);

  it('operator cancelled: the response is still followed while the job is live (its result may win), not cancelled', async () => {
    fake.alwaysBackground({ afterMs: 100 });
    const certified = await t
      .http()
      .post('/v1/providers/oa-long/certifications')
      .set(bearer(key))
      .send({ operation: 'summarize' });
    expect(certified.body.passed).toBe(true);
    fake.alwaysBackground({ afterMs: 60_000 });
    const live = await create(['oa-hold', 'oa-long']);
    const seen = await submitted(live.id, 'unknown');
    const res = await t
      .http()
      .post(`/v1/attempts/${seen.attempts[0].id}/resolve`)
      .set(bearer(key))
      .send({ status: 'cancelled', reason: 'stop waiting' });
    expect(res.status).toBe(200);
    // The next provider runs; the given-up response is looked up each period, never cancelled.
    const response = fake.responseOf(seen.attempts[0].id)!;
    const retrieves = response.retrieves.length;
    await sleep(RECONCILE_MS * 4);
    expect(response.retrieves.length).toBeGreaterThan(retrieves);
    expect(response.cancels).toBe(0);
    expect((await job(live.id)).status).toBe('running');
    // The owner gives up: now nobody waits for either response, and both are cancelled.
    expect((await t.http().post(`/v1/jobs/${live.id}/cancel`).set(bearer(key))).status).toBe(200);
    const done = await waitFor(
      () => job(live.id),
      (j) => j.attempts.every((a) => a.providerStatus === 'cancelled'),
      RECONCILE_MS * 2 + 10_000,
      100,
    );
    for (const a of done.attempts) expect(fake.responseOf(a.id)!.cancels).toBe(1);
  }, 40_000);

  it('a cancel whose answer stalls holds neither the housekeeping nor the failovers, and is cut at its own deadline', async () => {
    fake.alwaysBackground({ afterMs: 60_000, stallCancel: true });
    // Two jobs held unknown on a failover provider while their fallback is not certified; once it is, the
    // housekeeping gives both up (not the worker: its deadline passed with no fallback), and their responses are
    // cancelled at the fake, which never finishes answering a cancel.
    const held = [await create(['oa-failover', 'sim-late']), await create(['oa-failover', 'sim-late'])];
    for (const j of held) await submitted(j.id, 'unknown');
    const certified = await t
      .http()
      .post('/v1/providers/sim-late/certifications')
      .set(bearer(key))
      .send({ operation: 'summarize' });
    expect(certified.body.passed).toBe(true);
    const stalledCancel = await waitFor(
      () => Promise.resolve(fake.requests.find((r) => r.method === 'POST' && r.path.endsWith('/cancel'))),
      (r) => r !== undefined,
      10_000,
      20,
    );
    // While that cancel stalls: an attempt whose worker vanished past its deadline (seeded where no worker can
    // claim it: waiting on a provider the catalog does not name).
    const orphan = await createJob(t.dataSource, {
      ownerId: 'owner-resolution',
      status: 'running',
      providers: ['sim-hang'],
      waitingFor: 'no-such-provider',
    });
    await createAttempt(t.dataSource, orphan, { status: 'running', deadlineInMs: -1000 });
    const [a, b, c] = await waitFor(
      () => Promise.all([job(held[0].id), job(held[1].id), job(orphan.id)]),
      ([x, y, z]) => x.status === 'succeeded' && y.status === 'succeeded' && z.attempts[0].status === 'unknown',
      RECONCILE_MS * 4 + 10_000,
      100,
    );
    for (const j of [a, b]) expect(j.attempts[1]).toMatchObject({ provider: 'sim-late', outcome: 'won' });
    expect(c.status).toBe('unknown');
    // The stalled cancel was cut at its deadline (the provider's timeoutMs), not held by the SDK for ever.
    const cut = await waitFor(
      () => Promise.resolve(stalledCancel!.closedAt),
      (closedAt) => closedAt !== undefined,
      TIMEOUT_MS + 10_000,
      50,
    );
    expect(cut! - stalledCancel!.at).toBeLessThan(TIMEOUT_MS + 3000);
  }, 40_000);

  const certifyOaCert = () =>
    t.http().post('/v1/providers/oa-cert/certifications').set(bearer(key)).send({ operation: 'summarize' });
  /** The responses a certification's golden cases created at the fake (their key is sent as the attempt's). */
  const certifications = () =>
    [...fake.responses.values()].filter((r) =>
      String((r.body.metadata as Record<string, string>).onejob_attempt).startsWith('certify-oa-cert-'),
    );

  it('certification follows a response until hardTimeoutMs: one answered at 1.5 s with timeoutMs 1 s passes, on schedule too', async () => {
    fake.alwaysBackground({ afterMs: 1500, content: { summary: 'slow but right' } });
    const report = await certifyOaCert();
    expect(report.status).toBe(201);
    expect(report.body.passed).toBe(true);
    const scheduled = await t.app.get(CertificationService).certify('oa-cert', 'summarize', 'schedule');
    expect(scheduled.passed).toBe(true);
    expect(await t.app.get(CertificationService).isCertified('oa-cert', 'summarize')).toBe(true);
    expect(certifications().map((r) => r.cancels)).toEqual([0, 0, 0, 0]);
  }, 30_000);

  it('certification cancels a response still running at hardTimeoutMs: the case fails, and nothing runs on at the provider', async () => {
    fake.alwaysBackground({ afterMs: 60_000 });
    const report = await certifyOaCert();
    expect(report.status).toBe(201);
    expect(report.body.passed).toBe(false);
    const responses = certifications();
    expect(responses.length).toBe(report.body.cases.length);
    for (const response of responses) {
      expect(response.cancels).toBe(1);
      expect(response.cancelledAt).toBeDefined();
    }
  }, 30_000);

  it("hold: a failed or incomplete response fails the attempt with the provider's reason", async () => {
    fake.background({ afterMs: 1500, outcome: 'failed' }, { afterMs: 1500, outcome: 'incomplete' });
    // The fake hands its outcomes out in the order the requests reach it: the second job is created once the
    // first one's request has reached it, or one claim may send the two in either order.
    const failed = await create(['oa-hold']);
    await waitFor(
      () => job(failed.id),
      (j) => Boolean(j.attempts[0]?.providerRequestId),
      10_000,
      50,
    );
    const incomplete = await create(['oa-hold']);
    const [a, b] = await allTerminal([failed.id, incomplete.id], 15_000);
    expect(a.attempts[0]).toMatchObject({
      status: 'failed',
      resolvedBy: 'provider',
      providerStatus: 'failed',
      error: { reason: 'response_failed' },
    });
    expect(b.attempts[0]).toMatchObject({
      status: 'failed',
      resolvedBy: 'provider',
      providerStatus: 'incomplete',
      error: { reason: 'response_incomplete' },
    });
    expect(b.attempts[0].error!.message).toContain('max_output_tokens');
  }, 30_000);

  it("hold: past the provider's retention (404) the attempt stays unknown for an operator, the reason recorded", async () => {
    fake.retentionMs = 1500;
    fake.alwaysBackground({ afterMs: 60_000 });
    const expired = await create(['oa-hold']);
    const seen = await waitFor(
      () => job(expired.id),
      (j) => j.attempts[0]?.providerStatus === 'expired',
      15_000,
      100,
    );
    expect(seen.attempts[0]).toMatchObject({ status: 'unknown', resolvedBy: null });
    expect((await events(expired.id)).map((e) => e.reason)).toContain('provider_record_expired');
    const retrieves = fake.counters.retrieves;
    await sleep(RECONCILE_MS * 2.5);
    expect(fake.counters.retrieves).toBe(retrieves);
    // An operator ends it, and the metric says who.
    const byOperator = await resolvedBy('operator');
    const res = await t
      .http()
      .post(`/v1/attempts/${seen.attempts[0].id}/resolve`)
      .set(bearer(key))
      .send({ status: 'failed', reason: 'gone at the provider' });
    expect(res.status).toBe(200);
    expect((await job(expired.id)).attempts[0]).toMatchObject({ status: 'failed', resolvedBy: 'operator' });
    expect((await resolvedBy('operator')) - byOperator).toBe(1);
  }, 30_000);

  it('chat with store: true: a call whose answer never arrived is found by its attempt id in the stored completions', async () => {
    fake.script({ kind: 'json', content: { summary: 'stored answer' }, delayMs: 2500 });
    const lost = await create(['oa-stored']);
    const [settled] = await allTerminal([lost.id], 15_000);
    const [attempt] = settled.attempts;
    expect(settled).toMatchObject({ status: 'succeeded', completedBy: attempt.id });
    expect(attempt).toMatchObject({ status: 'succeeded', resolvedBy: 'provider', providerStatus: 'completed' });
    // The call was cut off at its hard timeout, before the answer: only the stored copy can have settled it.
    const sent = fake.requests.find((r) => r.body.store === true)!;
    expect(sent.body.metadata).toEqual({ onejob_attempt: attempt.id });
    expect(sent.closedAt! - sent.at).toBeLessThan(2500);
    expect(fake.counters.lists).toBeGreaterThanOrEqual(1);
    expect((await events(settled.id)).map((e) => e.reason)).toContain('provider_status');
  }, 30_000);

  it('a create call that never returned an id leaves the attempt unknowable, and it says so; nothing is retrieved', async () => {
    fake.background({ afterMs: 0, hangCreate: true });
    const lost = await create(['oa-hold']);
    const seen = await waitFor(
      () => job(lost.id),
      (j) => j.attempts[0]?.providerStatus === 'unknowable',
      15_000,
      100,
    );
    expect(seen.attempts[0]).toMatchObject({ status: 'unknown', providerRequestId: null });
    expect((await events(lost.id)).map((e) => e.reason)).toContain('provider_id_never_returned');
    await sleep(RECONCILE_MS * 2.5);
    expect(fake.counters.retrieves).toBe(0);
  }, 30_000);
});
