import { bearer, startTestApp, type TestApp } from './helpers/app.js';
import { spawnService, waitUntilReady } from './helpers/process.js';
import { waitFor } from './helpers/wait.js';
import { describeLocal } from './race/target.js';

const ITEMS = 10_000;
const body = JSON.stringify({
  items: Array.from({ length: ITEMS }, (_, i) => ({
    key: `kill-${i}`,
    operation: 'summarize',
    input: { text: `document ${i}` },
  })),
});

/** The service as an OS process, SIGKILLed while its batch's transaction is open; the API in this process checks. */
describeLocal('batches as processes: SIGKILL while a batch is written (I9, I10)', () => {
  let api: TestApp;
  let key: string;

  beforeAll(async () => {
    api = await startTestApp({ role: 'api' });
    key = await api.key('owner-batch-kill');
  }, 60_000);
  afterAll(() => api.close());

  const state = async () =>
    (
      await api.dataSource.query(`SELECT (SELECT count(*)::int FROM batches) AS batches,
        (SELECT count(*)::int FROM batch_items) AS items, (SELECT count(*)::int FROM jobs) AS jobs,
        (SELECT count(*)::int FROM job_events) AS events`)
    )[0] as { batches: number; items: number; jobs: number; events: number };
  /**
   * The batch's big statement running on another backend (this query excluded), known by its first line: the text
   * pg_stat_activity keeps is cut at track_activity_query_size (1 kB).
   */
  const writing = async () =>
    (
      await api.dataSource.query(
        `SELECT count(*)::int AS n FROM pg_stat_activity
          WHERE datname = current_database() AND pid <> pg_backend_pid() AND state = 'active'
            AND query LIKE 'WITH x AS MATERIALIZED (%AS x(ord int, idempotency_key text, fingerprint text%'`,
      )
    )[0].n as number;

  it('leaves the whole batch or nothing, and the same request then creates it whole', async () => {
    const victim = await spawnService({
      DATABASE_URL: api.database.url,
      CATALOG_FILE: 'test/fixtures/catalog.test.yaml',
      ROLE: 'api',
    });
    let sent: Promise<unknown> | undefined;
    try {
      await waitUntilReady(victim);
      sent = fetch(`${victim.baseUrl}/v1/batches`, {
        method: 'POST',
        headers: { ...bearer(key), 'content-type': 'application/json', 'idempotency-key': 'killed' },
        body,
      })
        .then(async (res) => `${res.status} ${(await res.text()).slice(0, 300)}`)
        .catch((error: unknown) => error);
      await waitFor(writing, (n) => n > 0, 20_000, 2).catch(async (error: Error) => {
        throw new Error(`${error.message}; the request answered ${String(await sent)}; ${victim.output().slice(-500)}`);
      });
    } finally {
      victim.kill('SIGKILL');
    }
    expect((await victim.exited).signal).toBe('SIGKILL');
    await sent;
    // PostgreSQL rolls the dead client's transaction back once it notices; until then nothing of it is visible.
    await waitFor(writing, (n) => n === 0, 20_000);
    const after = await state();
    const nothing = { batches: 0, items: 0, jobs: 0, events: 0 };
    const whole = { batches: 1, items: ITEMS, jobs: ITEMS, events: ITEMS };
    expect([nothing, whole]).toContainEqual(after);

    const retried = await api
      .http()
      .post('/v1/batches')
      .set(bearer(key))
      .set('Idempotency-Key', 'killed')
      .set('content-type', 'application/json')
      .send(body);
    expect(retried.status).toBe(after.batches ? 200 : 201);
    expect(retried.body.items).toHaveLength(ITEMS);
    expect(await state()).toEqual(whole);
  }, 90_000);
});
