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

  it("keeps what the purged attempts cost, per owner, day, operation, provider and currency, added to earlier purges'", async () => {
    await m.truncate();
    // A dollar a token on p1; p2 unpriced (its attempts have usage and no cost).
    await m.dataSource.query(
      `INSERT INTO provider_prices (provider, input_per_mtok, output_per_mtok, currency) VALUES ('p1', 1000000, 1000000, 'USD')`,
    );
    // Owner o1: two jobs on the same day and operation (purged by two batches), one with a discarded attempt, and
    // one on p2; owner o2: one job. Every attempt started 40 days ago, at 10:00 UTC.
    await m.dataSource.query(`
      WITH s(i, owner, provider, attempts, discarded) AS (
        VALUES (1, 'o1', 'p1', 2, true), (2, 'o1', 'p1', 1, false), (3, 'o1', 'p2', 1, false), (4, 'o2', 'p1', 1, false)
      ), j AS (
        INSERT INTO jobs (owner_id, idempotency_key, fingerprint, operation, input, providers, status, version,
                          error, completed_at, next_attempt_at)
        SELECT owner, 'usage-' || i, repeat('f', 64), 'summarize', '{}', ARRAY[provider], 'failed', 1,
               '{"reason":"x","message":"x"}', now() - interval '40 days' + i * interval '1 second', NULL FROM s
        RETURNING id, idempotency_key
      )
      INSERT INTO attempts (job_id, number, provider, status, outcome, job_version, deadline_at, hard_deadline_at,
                            started_at, usage)
      SELECT j.id, n, s.provider, 'failed', CASE WHEN s.discarded AND n = 2 THEN 'discarded' END, 0, now(), now(),
             date_trunc('day', now() - interval '40 days', 'UTC') + interval '10 hours',
             jsonb_build_object('promptTokens', 10 * n, 'completionTokens', n)
        FROM s JOIN j ON j.idempotency_key = 'usage-' || s.i, generate_series(1, s.attempts) n`);
    const purge = (limit: number) =>
      m.dataSource.transaction(async (manager) => {
        await manager.query(ALLOW_PURGE.text);
        return (await manager.query(PURGE_BATCH.text, [30, limit]))[0].purged as number;
      });
    // Oldest first: job 1 alone, then the rest (job 2 adds to the row job 1 left).
    expect(await purge(1)).toBe(1);
    expect(await purge(10)).toBe(3);
    const kept = await m.dataSource.query(
      `SELECT owner_id, to_char(day AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI') AS day, operation, provider, currency,
              attempts::int, prompt_tokens::int, completion_tokens::int, cost::float8, discarded_cost::float8
         FROM purged_usage ORDER BY owner_id, provider`,
    );
    const [{ day }] = await m.dataSource.query(
      `SELECT to_char(date_trunc('day', now() - interval '40 days', 'UTC') AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI') AS day`,
    );
    const row = { day, operation: 'summarize' };
    expect(kept).toEqual([
      // job 1: 11 + 22 USD (the second discarded), job 2: 11 USD.
      {
        ...row,
        owner_id: 'o1',
        provider: 'p1',
        currency: 'USD',
        attempts: 3,
        prompt_tokens: 40,
        completion_tokens: 4,
        cost: 44,
        discarded_cost: 22,
      },
      {
        ...row,
        owner_id: 'o1',
        provider: 'p2',
        currency: null,
        attempts: 1,
        prompt_tokens: 10,
        completion_tokens: 1,
        cost: 0,
        discarded_cost: 0,
      },
      {
        ...row,
        owner_id: 'o2',
        provider: 'p1',
        currency: 'USD',
        attempts: 1,
        prompt_tokens: 10,
        completion_tokens: 1,
        cost: 11,
        discarded_cost: 0,
      },
    ]);
    expect((await m.dataSource.query(`SELECT count(*)::int AS n FROM attempts`))[0].n).toBe(0);
  });
});
