import pg from 'pg';

import { AttemptOutcomes } from '../src/attempts/attempt-outcomes.js';
import type { Claimed } from '../src/attempts/attempt-runner.js';
import { AttemptRunner } from '../src/attempts/attempt-runner.js';
import { AttemptWorker } from '../src/attempts/attempt-worker.js';
import { Reconciler } from '../src/attempts/reconciler.js';
import { JobsService } from '../src/jobs/jobs.service.js';
import { WaitLimiter } from '../src/jobs/wait-limiter.js';
import { JobSignals } from '../src/ledger/job-signals.js';
import { CatalogService } from '../src/providers/catalog.service.js';
import { CertificationService } from '../src/providers/certification.service.js';
import { ProviderRegistry } from '../src/providers/provider-registry.js';
import { createAttempt, createJob, postJob } from './factories/index.js';
import { bearer, startTestApp, TEST_CATALOG, type TestApp } from './helpers/app.js';
import { provider, writeCatalog } from './helpers/catalog.js';
import { type ServiceProcess, spawnService, waitUntilReady } from './helpers/process.js';
import { sleep, waitFor } from './helpers/wait.js';

/**
 * Regression tests for issue 11's liveness items (docs/design.md#7-execution): nothing stuck, nothing lost.
 * The heavy multi-process fault cases are in test/race/liveness-faults.race-spec.ts.
 */

type Row = Record<string, any>;

const ghost = (c: { providers: Row[] }) =>
  c.providers.push({ ...provider(c as never, 'sim-primary'), name: 'ghost-provider', model: 'ghost-1' });

describe('liveness: a provider that left the catalog (poison job)', () => {
  let api: TestApp;
  let worker: ServiceProcess | undefined;

  beforeAll(async () => {
    // The API still knows ghost-provider (so POST accepts it); the worker process started below does not.
    api = await startTestApp({ role: 'api', catalogFile: writeCatalog(ghost) });
  });
  afterAll(async () => {
    if (worker && worker.child.exitCode === null) {
      worker.kill('SIGTERM');
      await worker.exited;
    }
    await api.close();
  });

  it('never blocks other jobs: normal jobs succeed, the ghost job fails provider_unavailable or moves to a certified fallback, and start-up warns', async () => {
    const key = await api.key('poison');
    await api.app.get(CertificationService).certify('sim-fallback', 'summarize');
    const create = async (k: string, providers?: string[]) =>
      (await postJob(api, key, { idempotencyKey: k, providers })).id as string;
    // The poison jobs first: they are the oldest due, so a claim that chokes on them would block everything.
    const onlyGhost = await create('ghost', ['ghost-provider']);
    const ghostThenFallback = await create('ghost-fallback', ['ghost-provider', 'sim-fallback']);
    const queuedGhost = await create('ghost-queued', ['ghost-provider']);
    await api
      .http()
      .post(`/v1/jobs/${queuedGhost}/attempts`)
      .set(bearer(key))
      .send({ provider: 'ghost-provider' })
      .expect(201);
    // An unknown attempt whose provider leaves the catalog: the reconciler must survive it.
    const heldGhost = await create('ghost-unknown', ['ghost-provider']);
    // Its deadline passed a minute ago, two minutes after its start; the job is unknown with it.
    await createAttempt(
      api.dataSource,
      { id: heldGhost },
      { provider: 'ghost-provider', status: 'unknown', workerId: 'gone' },
    );
    // And a call in flight on it whose worker went silent: the reconciler's overdue path must cope too.
    const runningGhost = await create('ghost-running', ['ghost-provider']);
    await createAttempt(
      api.dataSource,
      { id: runningGhost },
      {
        provider: 'ghost-provider',
        status: 'running',
        workerId: 'gone',
        deadlineInMs: -60_000,
        startedAgoMs: 120_000,
      },
    );
    const normal = await Promise.all(Array.from({ length: 6 }, (_, i) => create(`normal-${i}`)));

    worker = await spawnService({
      DATABASE_URL: api.database.url,
      CATALOG_FILE: TEST_CATALOG,
      ROLE: 'worker',
      WORKER_POLL_MS: '50',
      RECONCILE_INTERVAL_MS: '100',
    });
    await waitUntilReady(worker);
    const statuses = () => api.dataSource.query('SELECT id, status, error FROM jobs') as Promise<Row[]>;
    const byId = (rows: Row[]) => new Map(rows.map((r) => [r.id as string, r]));
    const jobs = byId(
      await waitFor(
        statuses,
        (rows) => {
          const m = byId(rows);
          return (
            [...normal, ghostThenFallback].every((id) => m.get(id)?.status === 'succeeded') &&
            [onlyGhost, queuedGhost].every((id) => m.get(id)?.status === 'failed')
          );
        },
        20_000,
      ),
    );
    expect(jobs.get(onlyGhost)!.error).toMatchObject({ reason: 'provider_unavailable' });
    expect(jobs.get(queuedGhost)!.error).toMatchObject({ reason: 'provider_unavailable' });
    const attempts: Row[] = await api.dataSource.query(
      'SELECT job_id, provider, status, error FROM attempts ORDER BY job_id, number',
    );
    expect(attempts.filter((a) => a.job_id === ghostThenFallback).map((a) => [a.provider, a.status])).toEqual([
      ['sim-fallback', 'succeeded'],
    ]);
    expect(attempts.filter((a) => a.job_id === onlyGhost)).toEqual([]); // nothing was ever started on it
    expect(attempts.filter((a) => a.job_id === queuedGhost)).toEqual([
      {
        job_id: queuedGhost,
        provider: 'ghost-provider',
        status: 'failed',
        error: expect.objectContaining({ reason: 'provider_unavailable' }),
      },
    ]);

    // Several reconciler passes over the unknown ghost attempt: no failure, the process lives, the attempt waits.
    await sleep(800);
    expect(worker.child.exitCode).toBeNull();
    expect(worker.output()).toMatch(/live jobs name a provider that is not in the catalog[^\n]*ghost-provider/);
    expect(worker.output()).not.toMatch(/reconcile pass failed|reconciling one attempt failed|claim failed|timeoutMs/);
    const [held] = await api.dataSource.query('SELECT status FROM attempts WHERE job_id = $1', [heldGhost]);
    expect(held.status).toBe('unknown');
    const [overdue] = await api.dataSource.query(
      'SELECT a.status, j.status AS job FROM attempts a JOIN jobs j ON j.id = a.job_id WHERE a.job_id = $1',
      [runningGhost],
    );
    expect(overdue).toEqual({ status: 'unknown', job: 'unknown' }); // it may have reached the provider: held
  }, 60_000);
});

describe('liveness: in-process (the test drives the worker and the reconciler)', () => {
  let t: TestApp;
  let worker: AttemptWorker;
  let runner: AttemptRunner;
  let reconciler: Reconciler;
  let jobs: JobsService;
  let registry: ProviderRegistry;
  let n = 0;

  beforeAll(async () => {
    process.env.FAKE_OPENAI_KEY ??= 'sk-fake';
    const catalogFile = writeCatalog((c) => {
      c.providers.push({
        name: 'sim-late',
        kind: 'simulated',
        model: 'late',
        timeoutMs: 200,
        hardTimeoutMs: 5000,
        onTimeout: 'hold',
        sideEffectFree: true,
        simulate: { latencyMs: 10, outcome: 'success' },
      });
      c.providers.push({
        name: 'sim-once',
        kind: 'simulated',
        model: 'once',
        timeoutMs: 2000,
        hardTimeoutMs: 5000,
        maxAttempts: 1,
        simulate: { latencyMs: 10, outcome: 'success' },
      });
      c.providers.push({
        name: 'sim-fo',
        kind: 'simulated',
        model: 'fo',
        timeoutMs: 2000,
        hardTimeoutMs: 5000,
        onTimeout: 'failover',
        sideEffectFree: true,
        simulate: { latencyMs: 10, outcome: 'success' },
      });
      // No status lookup and held: its unknown attempts wait for an operator.
      c.providers.push({
        name: 'held-openai',
        kind: 'openai',
        model: 'gpt-4o-mini',
        baseUrl: 'http://127.0.0.1:9',
        apiKeyEnv: 'FAKE_OPENAI_KEY',
        timeoutMs: 1000,
        hardTimeoutMs: 2000,
        onTimeout: 'hold',
      });
    });
    t = await startTestApp({ role: 'api', catalogFile });
    worker = t.app.get(AttemptWorker);
    runner = t.app.get(AttemptRunner);
    reconciler = t.app.get(Reconciler);
    jobs = t.app.get(JobsService);
    registry = t.app.get(ProviderRegistry);
  });
  afterAll(() => t.close());
  beforeEach(() => t.truncate());

  const newJob = (providers: string[]) =>
    jobs.create('owner-live', `k-${n++}`, { operation: 'summarize', input: { text: `text ${n}` }, providers });
  const claimOnly = async (jobId: string): Promise<Claimed> => {
    const claimed = await worker.claimBatch(10);
    const mine = claimed.find((c) => c.job.id === jobId);
    if (!mine) throw new Error(`job ${jobId} was not claimed: ${JSON.stringify(claimed)}`);
    return mine;
  };
  /** The worker's own path from a claim to the provider call (AttemptWorker.launch), then wait for it. */
  const launch = async (claimed: Claimed[]) => {
    (worker as unknown as { launch(c: Claimed[]): void }).launch(claimed);
    await waitFor(
      async () => worker.inFlightCount,
      (count) => count === 0,
      10_000,
    );
  };
  const jobRow = async (id: string): Promise<Row> =>
    (await t.dataSource.query('SELECT * FROM jobs WHERE id = $1', [id]))[0];
  const attemptRows = (jobId: string): Promise<Row[]> =>
    t.dataSource.query('SELECT * FROM attempts WHERE job_id = $1 ORDER BY number', [jobId]);
  const wasInvoked = async (providerName: string, attemptId: string) =>
    (await registry.adapter(providerName).lookup!({ attemptId, providerRequestId: null })).state !== 'unknown';

  it('item 2: an unknown attempt whose simulated provider did answer is settled by the reconciler lookup (by attempt id)', async () => {
    const job = await newJob(['sim-late']);
    const claimed = await claimOnly(job.id);
    const ready = await runner.begin([claimed]);
    const { attempt, prompt } = ready.get(claimed.attempt.id)!;
    // The call reaches the provider and it answers, but the worker never records it (it died, or the database was away).
    const operation = t.app.get(CatalogService).operation('summarize')!;
    await registry.adapter('sim-late').invoke({
      prompt,
      operation: 'summarize',
      outputSchema: operation.outputSchema,
      temperature: 0,
      maxTokens: 30,
      maxResponseBytes: 1_048_576,
      idempotencyKey: attempt.id,
      signal: AbortSignal.timeout(5000),
    });
    expect(await t.app.get(AttemptOutcomes).unknown(attempt.id, job.id, 'deadline_passed')).toBe(true);
    expect((await jobRow(job.id)).status).toBe('unknown');

    await reconciler.pass();
    const row = await jobRow(job.id);
    expect(row).toMatchObject({
      status: 'succeeded',
      completed_by: attempt.id,
      result: { summary: expect.any(String) },
    });
    expect(await attemptRows(job.id)).toEqual([
      expect.objectContaining({ id: attempt.id, status: 'succeeded', outcome: 'won' }),
    ]);
  });

  it('item 3: an attempt claimed long ago but marked running now keeps its full timeouts from the mark', async () => {
    const job = await newJob(['sim-primary']); // timeoutMs 2000, hardTimeoutMs 5000
    const claimed = await claimOnly(job.id);
    // As if the claim had waited 4 s (a stall) with deadlines counted from the claim: almost spent.
    await t.dataSource.query(
      `UPDATE attempts SET claimed_at = now() - interval '4 s', deadline_at = now() + interval '20 ms', hard_deadline_at = now() + interval '1 s' WHERE id = $1`,
      [claimed.attempt.id],
    );
    const before = Date.now();
    const ready = await runner.begin([claimed]);
    const { attempt } = ready.get(claimed.attempt.id)!;
    expect(attempt.status).toBe('running');
    expect(attempt.deadlineAt.getTime() - before).toBeGreaterThan(1500);
    expect(attempt.hardDeadlineAt.getTime() - before).toBeGreaterThan(4500);
    const [row] = await attemptRows(job.id);
    expect(new Date(row.deadline_at).getTime()).toBe(attempt.deadlineAt.getTime());
  });

  it('item 3: an attempt whose hard deadline passed before the call is never sent; the reconciler makes it not_sent and the job is retried', async () => {
    const job = await newJob(['sim-primary']);
    const claimed = await claimOnly(job.id);
    await t.dataSource.query(
      `UPDATE attempts SET deadline_at = now() - interval '2 s', hard_deadline_at = now() - interval '1 s' WHERE id = $1`,
      [claimed.attempt.id],
    );
    expect((await runner.begin([claimed])).size).toBe(0); // markRunning refuses it
    await launch([claimed]); // the worker's whole path: still nothing sent
    expect(await wasInvoked('sim-primary', claimed.attempt.id)).toBe(false);
    expect((await attemptRows(job.id))[0].status).toBe('starting');

    await reconciler.pass();
    const [first] = await attemptRows(job.id);
    expect(first).toMatchObject({ status: 'failed', error: expect.objectContaining({ reason: 'not_sent' }) });
    expect((await jobRow(job.id)).status).toBe('running');
    await launch(await worker.claimBatch(10));
    expect(await wasInvoked('sim-primary', claimed.attempt.id)).toBe(false);
    expect((await attemptRows(job.id)).map((a) => [a.number, a.provider, a.status])).toEqual([
      [1, 'sim-primary', 'failed'],
      [2, 'sim-primary', 'succeeded'],
    ]);
    expect((await jobRow(job.id)).status).toBe('succeeded');
  });

  it('item 4: a claimed attempt never sent (worker gone) ends failed not_sent, is not counted against maxAttempts, and the job succeeds without an operator', async () => {
    const job = await newJob(['sim-once']); // maxAttempts: 1, no fallback
    const claimed = await claimOnly(job.id);
    // The worker vanished between claim and call; its deadline passes.
    await t.dataSource.query(`UPDATE attempts SET deadline_at = now() - interval '1 s' WHERE id = $1`, [
      claimed.attempt.id,
    ]);
    await reconciler.pass();
    const [first] = await attemptRows(job.id);
    expect(first).toMatchObject({
      status: 'failed',
      error: expect.objectContaining({ reason: 'not_sent', retryable: true }),
    });
    expect((await jobRow(job.id)).status).not.toBe('failed');

    await launch(await worker.claimBatch(10));
    expect((await attemptRows(job.id)).map((a) => [a.number, a.status])).toEqual([
      [1, 'failed'],
      [2, 'succeeded'],
    ]);
    expect((await jobRow(job.id)).status).toBe('succeeded');
    const [{ operator }] = await t.dataSource.query(
      `SELECT count(*)::int AS operator FROM job_events WHERE job_id = $1 AND (actor_key_id IS NOT NULL OR reason = 'resolved_by_operator')`,
      [job.id],
    );
    expect(operator).toBe(0);
  });

  it('item 8: asking for an attempt on an uncertified fallback is 409 provider_not_certified; the primary and a certified one are accepted', async () => {
    const key = await t.key('owner-i6');
    const create = async (k: string) =>
      (
        await t
          .http()
          .post('/v1/jobs')
          .set(bearer(key))
          .set('Idempotency-Key', k)
          .send({ operation: 'summarize', input: { text: k } })
          .expect(201)
      ).body.id as string;
    const [a, b, c] = [await create('i6-a'), await create('i6-b'), await create('i6-c')];
    const refused = await t.http().post(`/v1/jobs/${a}/attempts`).set(bearer(key)).send({ provider: 'sim-fallback' });
    expect(refused.status).toBe(409);
    expect(refused.body).toMatchObject({ code: 'provider_not_certified' });
    expect(refused.headers['content-type']).toMatch(/application\/problem\+json/);
    expect(await attemptRows(a)).toEqual([]);

    await t.http().post(`/v1/jobs/${b}/attempts`).set(bearer(key)).send({ provider: 'sim-primary' }).expect(201);
    await t.app.get(CertificationService).certify('sim-fallback', 'summarize');
    const accepted = await t
      .http()
      .post(`/v1/jobs/${c}/attempts`)
      .set(bearer(key))
      .send({ provider: 'sim-fallback' })
      .expect(201);
    expect(accepted.body.attempts).toEqual([expect.objectContaining({ provider: 'sim-fallback', status: 'starting' })]);
  });

  it("item 11: a cancelled job's queued (unclaimed) attempt ends failed not_sent, not starting forever", async () => {
    const key = await t.key('owner-cancel');
    const id = (
      await t
        .http()
        .post('/v1/jobs')
        .set(bearer(key))
        .set('Idempotency-Key', 'cancel-queued')
        .send({ operation: 'summarize', input: { text: 'x' } })
        .expect(201)
    ).body.id;
    await t.http().post(`/v1/jobs/${id}/attempts`).set(bearer(key)).send({}).expect(201);
    const cancelled = await t.http().post(`/v1/jobs/${id}/cancel`).set(bearer(key)).expect(200);
    expect(cancelled.body.status).toBe('cancelled');
    expect(await attemptRows(id)).toEqual([
      expect.objectContaining({
        status: 'failed',
        claimed_at: null,
        error: expect.objectContaining({ reason: 'not_sent' }),
      }),
    ]);
    expect((await attemptRows(id))[0].finished_at).not.toBeNull();
  });

  it('item 11: 150 held unknown attempts (no lookup) older than one failover unknown attempt never starve it: the first pass fails it over', async () => {
    await t.app.get(CertificationService).certify('sim-fallback', 'summarize');
    await Promise.all(
      Array.from({ length: 150 }, async (_, g) => {
        const held = await createJob(t.dataSource, {
          ownerId: 'starve',
          idempotencyKey: `held-${g}`,
          providers: ['held-openai'],
          status: 'unknown',
        });
        await createAttempt(t.dataSource, held, {
          status: 'unknown',
          workerId: 'gone',
          deadlineInMs: -3_600_000,
          startedAgoMs: 3_600_000,
        });
      }),
    );
    const job = await newJob(['sim-fo', 'sim-fallback']);
    const claimed = await claimOnly(job.id);
    await runner.begin([claimed]);
    await t.dataSource.query(
      `UPDATE attempts SET status = 'unknown', deadline_at = now() - interval '1 minute' WHERE id = $1`,
      [claimed.attempt.id],
    );
    await t.dataSource.query(`UPDATE jobs SET status = 'unknown', next_attempt_at = NULL WHERE id = $1`, [job.id]);

    await reconciler.pass();
    expect((await attemptRows(job.id))[0]).toMatchObject({ status: 'cancelled' });
    const [{ reason }] = await t.dataSource.query(
      `SELECT reason FROM job_events WHERE attempt_id = $1 AND to_status = 'cancelled'`,
      [claimed.attempt.id],
    );
    expect(reason).toBe('failover');
    expect((await jobRow(job.id)).status).toBe('running');
    const [{ held }] = await t.dataSource.query(
      `SELECT count(*)::int AS held FROM attempts WHERE provider = 'held-openai' AND status = 'unknown'`,
    );
    expect(held).toBe(150); // untouched: they wait for an operator
  });
});

describe('liveness: long-polls (Prefer: wait)', () => {
  let api: TestApp;
  let limited: TestApp;
  let key: string;
  let n = 0;

  beforeAll(async () => {
    const catalogFile = writeCatalog((c) => (provider(c, 'sim-primary').simulate.latencyMs = 1500));
    api = await startTestApp({ role: 'api', catalogFile });
    limited = await startTestApp({ role: 'api', catalogFile, maxConcurrentWaits: 3 }, api.database);
    key = await api.key('owner-waits');
  });
  afterAll(async () => {
    await limited.close();
    await api.close();
  });

  const create = async (app: TestApp = api) =>
    (
      await app
        .http()
        .post('/v1/jobs')
        .set(bearer(key))
        .set('Idempotency-Key', `w-${n++}`)
        .send({ operation: 'summarize', input: { text: 'wait' } })
        .expect(201)
    ).body.id as string;
  const activeWaits = (app: TestApp) => (app.app.get(WaitLimiter) as unknown as { active: number }).active;
  const waiters = (app: TestApp) =>
    (app.app.get(JobSignals) as unknown as { waiters: Map<string, unknown> }).waiters.size;
  const getWaiting = (app: TestApp, id: string, signal: AbortSignal) =>
    fetch(`${app.baseUrl}/v1/jobs/${id}`, { headers: { ...bearer(key), prefer: 'wait=30' }, signal });

  it('item 7: 100 abandoned waits leave no waiter and run no query once their clients are gone', async () => {
    const ids = await Promise.all(Array.from({ length: 20 }, () => create()));
    const controllers = Array.from({ length: 100 }, () => new AbortController());
    const requests = controllers.map((c, i) =>
      getWaiting(api, ids[i % ids.length], c.signal).then(
        () => 'answered',
        () => 'aborted',
      ),
    );
    // The server holds them (each registered its waiter), then every client goes away.
    await waitFor(
      async () => activeWaits(api),
      (active) => active >= 90,
      10_000,
    );
    for (const c of controllers) c.abort();
    expect(await Promise.all(requests)).toEqual(controllers.map(() => 'aborted'));
    // Within a second on an idle machine; 5 s leaves room for a loaded CI box (this process is client and server,
    // and a full run has other suites' services beside it). What is tested is that none is left, not how fast.
    await waitFor(
      async () => [activeWaits(api), waiters(api)],
      ([active, held]) => active === 0 && held === 0,
      5000,
      20,
    );

    // Nobody queries on their behalf: no backend of this database starts a query for 2 s (LISTEN stays idle). The
    // process's own watches of its primary (each second, and the LISTEN session's every 5 s, src/health/primary-watch.ts
    // and src/database/pg-notifications.ts) ask whatever the waits do, and are all that may run.
    const probe = new pg.Client({ connectionString: api.database.url });
    await probe.connect();
    try {
      const [{ since }] = (await probe.query('SELECT now() AS since')).rows;
      await sleep(2000);
      const { rows } = await probe.query(
        `SELECT query FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()
           AND query_start > $1 AND query NOT LIKE 'SELECT pg_is_in_recovery() AS recovery,%'`,
        [since],
      );
      expect(rows).toEqual([]);
    } finally {
      await probe.end();
    }
  });

  it('item 7: waits beyond MAX_CONCURRENT_WAITS get 503 with Retry-After; a slot frees when its client goes away', async () => {
    const id = await create(limited);
    const controllers = Array.from({ length: 3 }, () => new AbortController());
    const held = controllers.map((c) => getWaiting(limited, id, c.signal).catch(() => undefined));
    await waitFor(
      async () => activeWaits(limited),
      (active) => active === 3,
      5000,
    );
    const refused = await limited.http().get(`/v1/jobs/${id}`).set(bearer(key)).set('Prefer', 'wait=30');
    expect(refused.status).toBe(503);
    expect(refused.body).toMatchObject({ code: 'service_unavailable' });
    expect(refused.headers['retry-after']).toMatch(/^\d+$/);
    // A plain GET is not a wait: it is served.
    await limited.http().get(`/v1/jobs/${id}`).set(bearer(key)).expect(200);
    controllers[0].abort();
    await waitFor(
      async () => activeWaits(limited),
      (active) => active === 2,
      1000,
      20,
    );
    const answer = await limited.http().get(`/v1/jobs/${id}`).set(bearer(key)).set('Prefer', 'wait=1');
    expect(answer.status).toBe(200);
    expect(answer.headers['preference-applied']).toBe('wait=1');
    for (const c of controllers) c.abort();
    await Promise.all(held);
  });

  it('item 7: a wait on an API-only process is woken by a settlement in another process (NOTIFY) within a second', async () => {
    await waitFor(
      async () => api.app.get(JobSignals).listening,
      (up) => up,
      5000,
    );
    const worker = await spawnService({
      DATABASE_URL: api.database.url,
      CATALOG_FILE: writeCatalog((c) => (provider(c, 'sim-primary').simulate.latencyMs = 1500)),
      ROLE: 'worker',
      WORKER_POLL_MS: '50',
    });
    try {
      await waitUntilReady(worker);
      // Earlier cases left pending jobs; let the worker settle them first.
      await waitFor(
        () => api.dataSource.query(`SELECT count(*)::int AS n FROM jobs WHERE status NOT IN ('succeeded')`),
        (r) => r[0].n === 0,
        20_000,
        100,
      );
      const id = await create();
      const answer = await api.http().get(`/v1/jobs/${id}`).set(bearer(key)).set('Prefer', 'wait=30');
      const arrivedAt = Date.now();
      expect(answer.status).toBe(200);
      expect(answer.body.status).toBe('succeeded');
      expect(answer.headers['preference-applied']).toBe('wait=30');
      const [{ completed_at }] = await api.dataSource.query('SELECT completed_at FROM jobs WHERE id = $1', [id]);
      expect(arrivedAt - new Date(completed_at).getTime()).toBeLessThan(1000);
    } finally {
      worker.kill('SIGTERM');
      await worker.exited;
    }
  }, 60_000);
});
