/**
 * History for the `history` and `retention` cases: terminal jobs with their attempts and events, generated in SQL
 * (no service involved), shaped as the service leaves them: 94 % succeeded (one attempt, six events), 3 % failed
 * (one attempt failed, six events), 3 % cancelled before any attempt (two events); one job in ten belongs to the
 * bench's own owner, the rest to 1,000 others; completed evenly over `days` days, oldest first.
 *
 * The ledger's tables lose their indexes and foreign keys while the rows go in and get them back after, exactly as
 * the catalog had them (read from it: whatever the migrations made), then VACUUM (FREEZE, ANALYZE): the state of
 * an old history that autovacuum has long been through, so the measurements after it are not measuring the vacuum.
 */
import pg from 'pg';

export interface SeedResult {
  jobs: number;
  seconds: number;
  /** Rows in, indexes back, vacuumed: each step's seconds. */
  steps: { insert: number; indexes: number; vacuum: number };
  sizesMb: Record<string, number>;
}

/** The tables the seed writes; their indexes and the foreign keys on or to them are dropped and made again. */
const TABLES = ['jobs', 'attempts', 'job_events'];
const CHUNK = 250_000;

const SEED_CHUNK = `
WITH s AS MATERIALIZED (
  SELECT i, gen_random_uuid() AS job_id, gen_random_uuid() AS attempt_id,
         CASE WHEN i % 100 < 94 THEN 'succeeded' WHEN i % 100 < 97 THEN 'failed' ELSE 'cancelled' END AS status,
         CASE WHEN i % 10 = 0 THEN 'bench' ELSE 'history-' || (i % 1000) END AS owner_id,
         now() - $4::float8 * interval '1 day' + (i::float8 / $3) * $4::float8 * interval '1 day' AS done
    FROM generate_series($1::bigint, $2::bigint) i
), j AS (
  INSERT INTO jobs (id, owner_id, idempotency_key, fingerprint, operation, input, providers, status, version, result,
                    error, completed_by, created_at, updated_at, completed_at, next_attempt_at, priority)
  SELECT job_id, owner_id, 'history-' || i, md5(i::text) || md5(owner_id), 'summarize', '{"text":"history"}',
         '{bench-zero}', status, 1,
         CASE WHEN status = 'succeeded' THEN '{"summary":"history"}'::jsonb END,
         CASE status WHEN 'failed' THEN '{"reason":"provider_error","message":"The provider answered 400."}'::jsonb
                     WHEN 'cancelled' THEN '{"reason":"cancelled","message":"The owner cancelled the job."}'::jsonb END,
         CASE WHEN status = 'succeeded' THEN attempt_id END,
         done - interval '2 s', done, done, NULL, 0
    FROM s
), a AS (
  INSERT INTO attempts (id, job_id, number, provider, status, outcome, job_version, deadline_at, hard_deadline_at,
                        claimed_at, worker_id, usage, error, result_digest, started_at, finished_at)
  SELECT attempt_id, job_id, 1, 'bench-zero', status, CASE WHEN status = 'succeeded' THEN 'won' END, 0,
         done + interval '4 s', done + interval '9 s', done - interval '1.5 s', 'history',
         '{"promptTokens":12,"completionTokens":7}',
         CASE WHEN status = 'failed' THEN '{"reason":"provider_error","message":"The provider answered 400."}'::jsonb END,
         CASE WHEN status = 'succeeded' THEN md5(i::text) || md5(i::text) END, done - interval '1 s', done
    FROM s WHERE status <> 'cancelled'
), e AS (
  INSERT INTO job_events (job_id, attempt_id, subject, from_status, to_status, reason, detail, at)
  SELECT s.job_id, ev.attempt_id, ev.subject, ev.from_status, ev.to_status, ev.reason, ev.detail, ev.at
    FROM s CROSS JOIN LATERAL (VALUES
      (1, 'job', NULL::uuid, NULL::text, 'pending', 'created', NULL::jsonb, s.done - interval '2 s'),
      (2, CASE WHEN s.status = 'cancelled' THEN 'job' ELSE 'attempt' END,
          CASE WHEN s.status <> 'cancelled' THEN s.attempt_id END,
          CASE WHEN s.status = 'cancelled' THEN 'pending' END,
          CASE WHEN s.status = 'cancelled' THEN 'cancelled' ELSE 'starting' END,
          CASE WHEN s.status = 'cancelled' THEN 'cancelled' ELSE 'claimed' END,
          CASE WHEN s.status <> 'cancelled' THEN '{"provider":"bench-zero","number":1}'::jsonb END,
          s.done - interval '1.5 s'),
      (3, 'job', NULL, 'pending', 'running', 'attempt_started', NULL, s.done - interval '1.5 s'),
      (4, 'attempt', s.attempt_id, 'starting', 'running', 'provider_called', NULL, s.done - interval '1 s'),
      (5, 'attempt', s.attempt_id, 'running', s.status,
          CASE WHEN s.status = 'succeeded' THEN 'result_won' ELSE 'provider_error' END, NULL, s.done),
      (6, 'job', NULL, 'running', s.status,
          CASE WHEN s.status = 'succeeded' THEN 'result_won' ELSE 'attempts_exhausted' END,
          jsonb_build_object('attemptId', s.attempt_id, 'version', 1), s.done)
    ) AS ev(n, subject, attempt_id, from_status, to_status, reason, detail, at)
   WHERE ev.n <= CASE WHEN s.status = 'cancelled' THEN 2 ELSE 6 END
)
SELECT count(*)::int AS n FROM s`;

interface Definition {
  tbl: string;
  name: string;
  def: string;
}

async function definitions(
  client: pg.ClientBase,
): Promise<{ fks: Definition[]; keys: Definition[]; indexes: Definition[] }> {
  const tables = `ARRAY[${TABLES.map((t) => `'${t}'::regclass`).join(', ')}]`;
  const fks = await client.query<Definition>(
    `SELECT conrelid::regclass::text AS tbl, conname AS name, pg_get_constraintdef(oid) AS def FROM pg_constraint
      WHERE contype = 'f' AND (conrelid = ANY (${tables}) OR confrelid = ANY (${tables})) ORDER BY 1, 2`,
  );
  const keys = await client.query<Definition>(
    `SELECT conrelid::regclass::text AS tbl, conname AS name, pg_get_constraintdef(oid) AS def FROM pg_constraint
      WHERE contype IN ('p', 'u') AND conrelid = ANY (${tables}) ORDER BY 1, 2`,
  );
  const indexes = await client.query<Definition>(
    `SELECT i.indrelid::regclass::text AS tbl, i.indexrelid::regclass::text AS name, pg_get_indexdef(i.indexrelid) AS def
       FROM pg_index i WHERE i.indrelid = ANY (${tables})
        AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid AND c.contype IN ('p', 'u', 'x'))
      ORDER BY 1, 2`,
  );
  return { fks: fks.rows, keys: keys.rows, indexes: indexes.rows };
}

export async function tableSizesMb(client: pg.ClientBase | pg.Pool): Promise<Record<string, number>> {
  const { rows } = await client.query<{ name: string; table_mb: number; indexes_mb: number }>(
    `SELECT relname AS name, round(pg_table_size(oid) / 1048576.0)::int AS table_mb,
            round(pg_indexes_size(oid) / 1048576.0)::int AS indexes_mb
       FROM pg_class WHERE relname = ANY ($1::text[])`,
    [TABLES],
  );
  const sizes: Record<string, number> = {};
  for (const r of rows) {
    sizes[r.name] = r.table_mb;
    sizes[`${r.name} indexes`] = r.indexes_mb;
  }
  return sizes;
}

/** Seeds `jobs` terminal jobs completed over the last `days` days (the database must have its migrations). */
export async function seedHistory(
  databaseUrl: string,
  jobs: number,
  days: number,
  log: (line: string) => void,
): Promise<SeedResult> {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  const t0 = performance.now();
  try {
    await client.query(`SET maintenance_work_mem = '1GB'`);
    const { fks, keys, indexes } = await definitions(client);
    for (const fk of fks) await client.query(`ALTER TABLE ${fk.tbl} DROP CONSTRAINT "${fk.name}"`);
    for (const key of keys) await client.query(`ALTER TABLE ${key.tbl} DROP CONSTRAINT "${key.name}"`);
    for (const index of indexes) await client.query(`DROP INDEX ${index.name}`);
    for (let lo = 1; lo <= jobs; lo += CHUNK) {
      const hi = Math.min(jobs, lo + CHUNK - 1);
      await client.query(SEED_CHUNK, [lo, hi, jobs, days]);
      log(`history: ${hi.toLocaleString('en')} of ${jobs.toLocaleString('en')} jobs in ${s(t0)} s`);
    }
    const t1 = performance.now();
    for (const key of keys) await client.query(`ALTER TABLE ${key.tbl} ADD CONSTRAINT "${key.name}" ${key.def}`);
    for (const index of indexes) await client.query(index.def);
    for (const fk of fks) await client.query(`ALTER TABLE ${fk.tbl} ADD CONSTRAINT "${fk.name}" ${fk.def}`);
    log(`history: indexes and foreign keys back in ${s(t1)} s`);
    const t2 = performance.now();
    await client.query(`VACUUM (FREEZE, ANALYZE) ${TABLES.join(', ')}`);
    await client.query('CHECKPOINT');
    log(`history: vacuumed in ${s(t2)} s`);
    return {
      jobs,
      seconds: Number(s(t0)),
      steps: { insert: (t1 - t0) / 1000, indexes: (t2 - t1) / 1000, vacuum: (performance.now() - t2) / 1000 },
      sizesMb: await tableSizesMb(client),
    };
  } finally {
    await client.end();
  }
}

const s = (since: number) => ((performance.now() - since) / 1000).toFixed(1);
