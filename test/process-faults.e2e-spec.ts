import { postJob } from './factories/index.js';
import { bearer, startTestApp, type TestApp } from './helpers/app.js';
import { provider, writeCatalog } from './helpers/catalog.js';
import { type ServiceProcess, spawnService, waitUntilReady } from './helpers/process.js';
import { sleep, waitFor } from './helpers/wait.js';
import { describeLocal } from './race/target.js';

/** The API in this process (ROLE=api never starts an attempt); workers as separate OS processes on the same database. */
// Part of `npm run test:race`; needs a database and worker processes of its own, so URL mode skips it.
describeLocal('workers as processes: kill, terminate, roles', () => {
  let api: TestApp;
  let key: string;
  let catalogFile: string;

  beforeAll(async () => {
    catalogFile = writeCatalog((c) => {
      Object.assign(provider(c, 'sim-primary'), { timeoutMs: 500, hardTimeoutMs: 5000, onTimeout: 'hold' });
      provider(c, 'sim-primary').simulate.latencyMs = 3000;
    });
    api = await startTestApp({ role: 'api', catalogFile });
    key = await api.key('owner-processes');
  });
  afterAll(() => api.close());

  const worker = (extra: Record<string, string> = {}) =>
    spawnService({
      DATABASE_URL: api.database.url,
      CATALOG_FILE: catalogFile,
      ROLE: 'worker',
      WORKER_POLL_MS: '20',
      RECONCILE_INTERVAL_MS: '100',
      ...extra,
    });
  const create = async (k: string) => (await postJob(api, key, { idempotencyKey: k })).id as string;
  const attemptsOf = (jobIds: string[]) =>
    api.dataSource.query('SELECT job_id, status FROM attempts WHERE job_id = ANY($1) ORDER BY job_id, number', [
      jobIds,
    ]) as Promise<Array<{ job_id: string; status: string }>>;

  it('ROLE=api never starts an attempt', async () => {
    const id = await create('api-only');
    await sleep(500);
    expect(await attemptsOf([id])).toEqual([]);
    const job = (await api.http().get(`/v1/jobs/${id}`).set(bearer(key))).body;
    expect(job.status).toBe('pending');
  });

  it('after SIGKILL of the worker mid-attempt, every interrupted attempt becomes unknown (never failed) and none is repeated', async () => {
    const ids = await Promise.all(['k1', 'k2', 'k3'].map(create));
    const victim = await worker();
    try {
      await waitUntilReady(victim);
      await waitFor(
        () => attemptsOf(ids),
        (rows) => rows.length === 3 && rows.every((r) => r.status === 'running'),
      );
    } finally {
      victim.kill('SIGKILL');
    }
    expect((await victim.exited).signal).toBe('SIGKILL');

    // A fresh worker's reconciler finds the silent attempts past their deadline.
    const survivor = await worker();
    try {
      await waitUntilReady(survivor);
      const rows = await waitFor(
        () => attemptsOf(ids),
        (r) => r.every((a) => a.status === 'unknown'),
        10_000,
      );
      expect(rows).toHaveLength(3);
      await sleep(600);
      expect(await attemptsOf(ids)).toEqual(rows); // held: no second attempt on any job
      const jobs = await api.dataSource.query('SELECT status FROM jobs WHERE id = ANY($1)', [ids]);
      expect(jobs.map((j: { status: string }) => j.status)).toEqual(['unknown', 'unknown', 'unknown']);
    } finally {
      survivor.kill('SIGTERM');
      await survivor.exited;
    }
  });

  it('on SIGTERM a worker lets in-flight attempts finish within the grace period and exits 0', async () => {
    const ids = await Promise.all(['t1', 't2'].map(create));
    const service: ServiceProcess = await worker({ SHUTDOWN_GRACE_MS: '8000' });
    await waitUntilReady(service);
    await waitFor(
      () => attemptsOf(ids),
      (rows) => rows.length === 2 && rows.every((r) => r.status === 'running'),
    );
    expect((await fetch(`${service.baseUrl}/health/live`)).status).toBe(200);
    service.kill('SIGTERM');
    // The listener closes at once, while the attempts (3 s each) are still draining.
    await waitFor(
      () =>
        fetch(`${service.baseUrl}/health/live`).then(
          () => 'open',
          () => 'closed',
        ),
      (state) => state === 'closed',
      1000,
    );
    expect(service.child.exitCode).toBeNull();
    const { code } = await service.exited;
    expect(code).toBe(0);
    const rows = await attemptsOf(ids);
    // The 3 s calls finished inside the 8 s grace: their results settled the jobs.
    expect(rows.map((r) => r.status)).toEqual(['succeeded', 'succeeded']);
    const jobs = await api.dataSource.query('SELECT status, version FROM jobs WHERE id = ANY($1)', [ids]);
    expect(jobs).toEqual([
      { status: 'succeeded', version: 1 },
      { status: 'succeeded', version: 1 },
    ]);
  });

  it('on SIGTERM past the grace period, a cut-off attempt is left for the reconciler as unknown, and the job is not lost', async () => {
    const id = await create('cut-off');
    const service = await worker({ SHUTDOWN_GRACE_MS: '200' });
    await waitUntilReady(service);
    await waitFor(
      () => attemptsOf([id]),
      (rows) => rows[0]?.status === 'running',
    );
    service.kill('SIGTERM');
    expect((await service.exited).code).toBe(0);
    const rows = await attemptsOf([id]);
    expect(rows).toEqual([{ job_id: id, status: 'unknown' }]);
    const [job] = await api.dataSource.query('SELECT status FROM jobs WHERE id = $1', [id]);
    expect(job.status).toBe('unknown');
  });
});
