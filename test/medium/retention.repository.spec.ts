import { ALLOW_PURGE, PURGE_BATCH } from '../../src/retention/retention.sql.js';
import { type MigratedDatabase, migratedDatabase } from './database.js';

/**
 * The purge's cost on a real PostgreSQL, no app: a batch reads what it deletes, never the whole jobs table.
 * Each attempt it deletes is checked against jobs.completed_by (FK_jobs_completed_by, deferred to the commit);
 * without an index on that column each check is a sequential scan of jobs, so a batch of 500 at 10 million jobs
 * read the table 500 times (docs/benchmarks.md#history).
 */
describe('the retention purge (real PostgreSQL, no app)', () => {
  let m: MigratedDatabase;

  beforeAll(async () => {
    m = await migratedDatabase(2);
  });
  afterAll(() => m.close());

  it('checks the deleted attempts against jobs by index: no sequential scan of jobs, however many jobs there are', async () => {
    // 5,000 succeeded jobs, each with its winning attempt, completed 40 days ago and today alternately.
    await m.dataSource.query(`
      WITH s AS MATERIALIZED (
        SELECT i, gen_random_uuid() AS job_id, gen_random_uuid() AS attempt_id,
               now() - CASE WHEN i % 2 = 0 THEN interval '40 days' ELSE interval '1 hour' END AS done
          FROM generate_series(1, 5000) i
      ), j AS (
        INSERT INTO jobs (id, owner_id, idempotency_key, fingerprint, operation, input, providers, status, version,
                          result, completed_by, completed_at, next_attempt_at)
        SELECT job_id, 'purge-owner', 'k' || i, repeat('f', 64), 'summarize', '{}', '{sim-primary}', 'succeeded', 1,
               '{"summary":"x"}', attempt_id, done, NULL FROM s
      )
      INSERT INTO attempts (id, job_id, number, provider, status, outcome, job_version, deadline_at, hard_deadline_at)
      SELECT attempt_id, job_id, 1, 'sim-primary', 'succeeded', 'won', 0, done, done FROM s`);
    await m.dataSource.query('ANALYZE jobs, attempts');

    const scans = await m.dataSource.transaction(async (manager) => {
      await manager.query(ALLOW_PURGE.text);
      const [purged] = await manager.query(PURGE_BATCH.text, [30, 100]);
      expect(purged.purged).toBe(100);
      const seqScans = async () =>
        Number(
          (await manager.query(`SELECT seq_scan FROM pg_stat_xact_user_tables WHERE relname = 'jobs'`))[0].seq_scan,
        );
      // The deferred foreign-key checks run here instead of at the commit, inside this transaction's counters.
      const before = await seqScans();
      await manager.query('SET CONSTRAINTS ALL IMMEDIATE');
      return (await seqScans()) - before;
    });
    // Before IDX_jobs_completed_by: one scan of jobs per attempt deleted (100).
    expect(scans).toBe(0);
    const [{ n }] = await m.dataSource.query(`SELECT count(*)::int AS n FROM jobs`);
    expect(n).toBe(4900);
  });
});
