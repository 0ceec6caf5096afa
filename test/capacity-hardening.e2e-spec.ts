import { MetricsService } from '../src/metrics/metrics.service.js';
import { FakeOpenAiServer } from './fakes/fake-openai.server.js';
import { bearer, startTestApp, type TestApp } from './helpers/app.js';
import { writeCatalog } from './helpers/catalog.js';
import { createTestDatabase, type TestDatabase } from './helpers/database.js';
import { sleep, waitFor } from './helpers/wait.js';

// Pauses and the breaker against a real HTTP provider (the fake OpenAI server), issue 22 items 5, 12 and 16a:
// a long Retry-After must not strand jobs, a Retry-After of 0 or less must still pause, a breaker that closes must
// release the jobs deferred behind it, and an owner's requested attempt must not reach a paused provider.

type Attempt = {
  id: string;
  provider: string;
  status: string;
  startedAt: string | null;
  finishedAt: string | null;
  error?: { reason: string } | null;
};
type JobBody = { id: string; status: string; error?: { reason: string } | null; attempts: Attempt[] };

const terminal = (job: JobBody) => ['succeeded', 'failed', 'cancelled'].includes(job.status);
const POLL_MS = 100;

describe('provider pauses and the breaker (hardening)', () => {
  // One fake per provider, so that each test counts the calls its own provider received.
  const paused = new FakeOpenAiServer();
  const floor = new FakeOpenAiServer();
  const flappy = new FakeOpenAiServer();
  const sick = new FakeOpenAiServer();
  let db: TestDatabase;
  let t: TestApp;
  let key: string;
  let catalogFile: string;

  const openai = (name: string, fake: FakeOpenAiServer, extra: object = {}) => ({
    name,
    kind: 'openai',
    model: 'gpt-4o-mini',
    baseUrl: fake.url,
    apiKeyEnv: 'FAKE_OPENAI_KEY',
    timeoutMs: 3000,
    hardTimeoutMs: 6000,
    ...extra,
  });

  beforeAll(async () => {
    process.env.FAKE_OPENAI_KEY = 'sk-fake';
    await Promise.all([paused.start(), floor.start(), flappy.start(), sick.start()]);
    catalogFile = writeCatalog((c) => {
      c.providers.push(
        openai('fake-paused', paused),
        openai('fake-floor', floor, { maxAttempts: 1, maxDeferrals: 3 }),
        // A half-open window (hardTimeoutMs + 5 s = 13 s) much longer than the probe's answer (1 s).
        openai('fake-flappy', flappy, {
          maxAttempts: 1,
          hardTimeoutMs: 8000,
          breaker: { failures: 2, windowMs: 30_000, cooldownMs: 1000 },
        }),
        openai('fake-sick', sick, { maxAttempts: 1, breaker: { failures: 1, windowMs: 60_000, cooldownMs: 60_000 } }),
      );
    });
    db = await createTestDatabase();
    t = await startTestApp(
      { role: 'all', catalogFile, workerPollMs: POLL_MS, reconcileIntervalMs: 200, workerConcurrency: 8 },
      db,
    );
    key = await t.key('owner-pauses', ['jobs:write', 'jobs:read', 'providers:certify']);
    const certified = await t
      .http()
      .post('/v1/providers/sim-fallback/certifications')
      .set(bearer(key))
      .send({ operation: 'summarize' });
    expect(certified.body.passed).toBe(true);
  });
  afterAll(async () => {
    await t?.close();
    await db?.drop();
    await Promise.all([paused.stop(), floor.stop(), flappy.stop(), sick.stop()]);
  });

  const create = async (idempotencyKey: string, providers: string[]) => {
    const res = await t
      .http()
      .post('/v1/jobs')
      .set(bearer(key))
      .set('Idempotency-Key', idempotencyKey)
      .send({ operation: 'summarize', input: { text: idempotencyKey }, providers });
    expect(res.status).toBe(201);
    return res.body as JobBody;
  };
  const job = async (id: string) => (await t.http().get(`/v1/jobs/${id}`).set(bearer(key))).body as JobBody;
  const until = (id: string, done: (job: JobBody) => boolean, timeoutMs = 10_000) =>
    waitFor(() => job(id), done, timeoutMs);
  const pausedUntil = async (provider: string) => {
    const providers = (await t.http().get('/v1/providers').set(bearer(key))).body as Array<{
      name: string;
      capacity: { pausedUntil: string | null };
    }>;
    return providers.find((p) => p.name === provider)!.capacity.pausedUntil;
  };
  /** What an operator does to end a pause early (docs/operations.md#runbook-a-provider-keeps-throttling). */
  const clearPause = (provider: string) =>
    t.dataSource.query(`UPDATE provider_state SET paused_until = NULL WHERE provider = $1`, [provider]);

  describe('a long Retry-After (item 5)', () => {
    const hourLong = { kind: 'status' as const, status: 429, headers: { 'retry-after': '1000000000' } };

    it('sends the job that met it, and new jobs, to the certified fallback at once instead of waiting out the pause', async () => {
      paused.reset();
      paused.script(hourLong);
      const first = await until((await create('long-pause-1', ['fake-paused', 'sim-fallback'])).id, terminal);
      expect(first.status).toBe('succeeded');
      expect(first.attempts.map((a) => [a.provider, a.status, a.error?.reason ?? null])).toEqual([
        ['fake-paused', 'failed', 'rate_limited'],
        ['sim-fallback', 'succeeded', null],
      ]);
      // Capped at an hour, for every replica.
      expect(Date.parse((await pausedUntil('fake-paused'))!) - Date.now()).toBeGreaterThan(3_500_000);
      const created = Date.now();
      const second = await until((await create('long-pause-2', ['fake-paused', 'sim-fallback'])).id, terminal, 5_000);
      expect(second.attempts.map((a) => [a.provider, a.status])).toEqual([['sim-fallback', 'succeeded']]);
      expect(Date.parse(second.attempts[0].startedAt!) - created).toBeLessThan(3_000);
      expect(paused.requests).toHaveLength(1);
    });

    it('makes a job with no certified fallback wait as pending, with no attempt, and clearing the pause starts it promptly', async () => {
      await clearPause('fake-paused');
      paused.reset();
      paused.script(hourLong);
      // The job that met the 429: its next attempt waits for the pause, and it is no longer `running`.
      const limited = await until((await create('pause-alone-1', ['fake-paused'])).id, (j) =>
        j.attempts.some((a) => a.status === 'failed'),
      );
      const born = await create('pause-alone-2', ['fake-paused']);
      await sleep(1_000);
      const [waitingAfter429, waitingNew] = await Promise.all([job(limited.id), job(born.id)]);
      expect(waitingAfter429).toMatchObject({ status: 'pending' });
      expect(waitingAfter429.attempts.map((a) => a.error?.reason)).toEqual(['rate_limited']);
      expect(waitingNew).toMatchObject({ status: 'pending', attempts: [] });
      expect(paused.requests).toHaveLength(1);
      const cleared = Date.now();
      await clearPause('fake-paused');
      for (const id of [limited.id, born.id]) {
        const done = await until(id, terminal, 10_000);
        expect(done.status).toBe('succeeded');
        const last = done.attempts[done.attempts.length - 1];
        expect(last.provider).toBe('fake-paused');
        // Promptly: a few poll periods, not the hour the provider asked for.
        expect(Date.parse(last.startedAt!) - cleared).toBeLessThan(5_000);
      }
    });
  });

  describe("an owner's requested attempt during a pause (item 16a)", () => {
    it('is refused with 409 provider_paused and Retry-After, and no call reaches the paused provider', async () => {
      await clearPause('fake-paused');
      paused.reset();
      await t.dataSource.query(
        `INSERT INTO provider_state (provider, paused_until) VALUES ('fake-paused', now() + interval '60 seconds')
         ON CONFLICT (provider) DO UPDATE SET paused_until = EXCLUDED.paused_until`,
      );
      // A claim already in flight read the providers' states before the pause was written (the read runs beside the
      // claim's transaction) and would still send a job created now: under load that claim can take a while. Let it
      // end, so the job below meets the pause, which is what this case is about.
      await sleep(1_000);
      const waiting = await create('requested-during-pause', ['fake-paused']);
      await sleep(300);
      const res = await t.http().post(`/v1/jobs/${waiting.id}/attempts`).set(bearer(key)).send({});
      expect(res.status).toBe(409);
      expect(res.body).toMatchObject({ code: 'provider_paused' });
      const retryAfter = Number(res.headers['retry-after']);
      expect(retryAfter).toBeGreaterThanOrEqual(50);
      expect(retryAfter).toBeLessThanOrEqual(60);
      await sleep(1_000);
      expect(paused.requests).toHaveLength(0);
      expect(await job(waiting.id)).toMatchObject({ status: 'pending', attempts: [] });
      // Once the pause is over (here: cleared), the job goes on by itself.
      await clearPause('fake-paused');
      expect((await until(waiting.id, terminal)).status).toBe('succeeded');
      expect(paused.requests).toHaveLength(1);
    });

    it('queued just before a pause began, is held by the worker until the pause ends, never sent into it', async () => {
      paused.reset();
      // An API alone queues the attempt (no worker takes it); the pause begins; then a worker starts.
      const own = await createTestDatabase();
      const api = await startTestApp({ role: 'api', catalogFile }, own);
      let worker: TestApp | undefined;
      try {
        const ownerKey = await api.key('owner-queued', ['jobs:write', 'jobs:read']);
        const created = await api
          .http()
          .post('/v1/jobs')
          .set(bearer(ownerKey))
          .set('Idempotency-Key', 'queued-then-paused')
          .send({ operation: 'summarize', input: { text: 'queued' }, providers: ['fake-paused'] });
        expect(created.status).toBe(201);
        const queued = await api.http().post(`/v1/jobs/${created.body.id}/attempts`).set(bearer(ownerKey)).send({});
        expect(queued.status).toBe(201);
        const [{ until: pauseEnd }] = await api.dataSource.query(
          `INSERT INTO provider_state (provider, paused_until) VALUES ('fake-paused', now() + interval '5 seconds') RETURNING paused_until AS until`,
        );
        worker = await startTestApp({ role: 'worker', catalogFile, workerPollMs: POLL_MS }, own);
        // Else the pause would be over before any worker could send the call, and this would prove nothing.
        expect(Date.now()).toBeLessThan(new Date(pauseEnd).getTime() - 1_000);
        const read = () =>
          api
            .http()
            .get(`/v1/jobs/${created.body.id}`)
            .set(bearer(ownerKey))
            .then((r) => r.body as JobBody);
        const done = await waitFor(read, terminal, 15_000);
        expect(done.status).toBe('succeeded');
        expect(done.attempts).toHaveLength(1);
        expect(paused.requests).toHaveLength(1);
        // Same machine, so the database's clock and ours agree to well within the slack.
        expect(paused.requests[0].at).toBeGreaterThanOrEqual(new Date(pauseEnd).getTime() - 100);
      } finally {
        await worker?.app.close();
        await api.close();
      }
    });
  });

  describe("an owner's requested attempt behind an open breaker", () => {
    it('waits for the cooldown once, instead of being claimed and refused at every poll', async () => {
      sick.reset();
      sick.failAll(500);
      expect((await until((await create('sick-1', ['fake-sick'])).id, terminal)).status).toBe('failed');
      const behind = await create('sick-behind', ['fake-sick']);
      await until(behind.id, (j) => j.status === 'pending');
      const requested = await t.http().post(`/v1/jobs/${behind.id}/attempts`).set(bearer(key)).send({});
      expect(requested.status).toBe(201);
      const refusals = async () => {
        const { values } = await t.app.get(MetricsService).providerThrottled.get();
        return values.find((v) => v.labels.provider === 'fake-sick' && v.labels.reason === 'breaker_open')?.value ?? 0;
      };
      const before = await refusals();
      await sleep(15 * POLL_MS);
      // One deferral to the cooldown's end; before, one refused claim per poll period (about 15 here).
      expect((await refusals()) - before).toBeLessThanOrEqual(2);
      expect(sick.requests).toHaveLength(1);
      expect((await job(behind.id)).attempts.map((a) => a.status)).toEqual(['starting']);
    });
  });

  describe('a Retry-After of zero or less (item 12)', () => {
    it('still pauses the provider for at least a second: Retry-After 0 or -1 and retry-after-ms 0 all wait before the next call', async () => {
      floor.reset();
      floor.script(
        { kind: 'status', status: 429, headers: { 'retry-after': '0' } },
        { kind: 'status', status: 429, headers: { 'retry-after': '-1' } },
        { kind: 'status', status: 429, headers: { 'retry-after-ms': '0' } },
      );
      const done = await until((await create('floor-1', ['fake-floor'])).id, terminal, 15_000);
      expect(done.attempts.map((a) => a.error?.reason ?? a.status)).toEqual([
        'rate_limited',
        'rate_limited',
        'rate_limited',
        'succeeded',
      ]);
      const arrivals = floor.arrivals();
      expect(arrivals).toHaveLength(4);
      for (let i = 1; i < arrivals.length; i++) expect(arrivals[i] - arrivals[i - 1]).toBeGreaterThanOrEqual(990);
    });
  });

  describe('a flapping provider whose breaker closes again (item 12)', () => {
    it('starts a job deferred behind the half-open probe as soon as the probe closes the breaker', async () => {
      flappy.reset();
      flappy.failAll(500);
      for (const name of ['flap-1', 'flap-2']) {
        expect((await until((await create(name, ['fake-flappy'])).id, terminal)).status).toBe('failed');
      }
      // Open now, for a 1 s cooldown. The probe will take 1 s to answer; the second job comes after it.
      flappy.recover();
      flappy.latencyMs(1_000);
      const probe = await create('flap-probe', ['fake-flappy']);
      await until(probe.id, (j) => j.attempts.length > 0);
      const behind = await create('flap-behind', ['fake-flappy']);
      const probed = await until(probe.id, terminal);
      expect(probed.status).toBe('succeeded');
      const closedAt = Date.parse(probed.attempts[0].finishedAt!);
      const done = await until(behind.id, terminal, 20_000);
      expect(done.status).toBe('succeeded');
      // Before the fix it idled to the end of the half-open window, about 12 s after the probe's answer.
      expect(Date.parse(done.attempts[0].startedAt!) - closedAt).toBeLessThan(3_000);
    });
  });
});
