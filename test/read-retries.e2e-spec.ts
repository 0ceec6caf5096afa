import pg from 'pg';

import { bearer, startTestApp, type TestApp } from './helpers/app.js';
import { waitFor } from './helpers/wait.js';

/**
 * I13's retry for reads (docs/operations.md#failover): a read whose connection dies under it (a failover ends the
 * old primary's sessions) failed before anything could commit, so it runs once more on a fresh connection within
 * the request's budget, and the client gets its answer, not a 503. The connection is made to die mid-read here:
 * the jobs table is locked by this test, the service's read waits for it, and its backend is terminated (57P01)
 * while it waits; the lock is let go at once, so a second try succeeds.
 */
describe('reads retried once on a fresh connection', () => {
  let t: TestApp;
  let key: string;
  let admin: pg.Client;

  beforeAll(async () => {
    t = await startTestApp();
    key = await t.key('owner-read-retry');
    admin = new pg.Client({ connectionString: t.database.url });
    await admin.connect();
  });

  afterAll(async () => {
    await admin?.end();
    await t?.close();
  });

  /** Runs `request` with the jobs table locked, terminates the backends that wait for the lock, then lets go. */
  const cutMidRead = async (request: () => Promise<Response>) => {
    await admin.query('BEGIN');
    await admin.query('LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE');
    const answer = request();
    try {
      const waiting = await waitFor(
        async () =>
          (
            await admin.query<{ pid: number }>(
              `SELECT pid FROM pg_stat_activity
                WHERE datname = current_database() AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()`,
            )
          ).rows,
        (rows) => rows.length > 0,
        5_000,
      );
      for (const { pid } of waiting) await admin.query('SELECT pg_terminate_backend($1)', [pid]);
    } finally {
      await admin.query('COMMIT');
    }
    return answer;
  };

  it('GET /v1/jobs/{id} whose connection is terminated mid-read answers 200 with the job', async () => {
    const created = await t
      .http()
      .post('/v1/jobs')
      .set(bearer(key))
      .set('Idempotency-Key', 'read-retry-1')
      .send({ operation: 'summarize', input: { text: 'read me twice' } });
    expect(created.status).toBe(201);
    const res = await cutMidRead(() => fetch(`${t.baseUrl}/v1/jobs/${created.body.id}`, { headers: bearer(key) }));
    expect({ status: res.status, body: (await res.json()) as { id?: string } }).toEqual({
      status: 200,
      body: expect.objectContaining({ id: created.body.id }),
    });
  });

  it('GET /v1/jobs (a list) whose connection is terminated mid-read answers 200 with the page', async () => {
    const res = await cutMidRead(() => fetch(`${t.baseUrl}/v1/jobs?limit=5`, { headers: bearer(key) }));
    expect(res.status).toBe(200);
    expect(((await res.json()) as { items: unknown[] }).items.length).toBeGreaterThan(0);
  });
});
