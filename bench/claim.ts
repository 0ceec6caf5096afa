/**
 * `claim`: the claim's first statement alone (docs/design.md#fair-share), on 100,000 due jobs (and 2,000 running,
 * their deadlines ahead) of one owner and then of 300 owners, in one connection, each run in a transaction rolled
 * back, the statements interleaved so that load moves them alike: the FIFO claim from before fair share (the
 * reference), the sole-owner claim (CLAIM_SOLE) and the fair claim (CLAIM_DUE); named (prepared, PostgreSQL's own
 * choice between a custom and a generic plan), named after `SET LOCAL plan_cache_mode = force_generic_plan` (as the
 * worker sends it), and unnamed (parsed and planned every time, as behind a pooler with DB_PREPARED_STATEMENTS=false).
 */
import pg from 'pg';

import { statementName } from '../src/database/prepared-statements.js';
import { CLAIM_DUE, CLAIM_SOLE } from '../src/ledger/jobs.sql.js';

const JOBS = 100_000;
const RUNS = 300;
/** The claim's arguments as the worker sends them: a window of 64, one capped provider with room 5. */
const ARGS = [64, ['bench-capped'], [5]];

const DUE = `next_attempt_at <= now() AND status IN ('pending', 'running', 'unknown')`;
const COLUMNS = `j.id, j.owner_id, j.idempotency_key, j.fingerprint, j.operation, j.input, j.providers, j.status,
  j.version, j.result, j.error, j.completed_by, j.created_at, j.updated_at, j.completed_at, j.trace_context, j.priority,
  COALESCE((SELECT json_agg(a ORDER BY a.number) FROM attempts a WHERE a.job_id = j.id), '[]'::json) AS attempts`;
/** The claim of commit 8375c37, before fair share: the K oldest due jobs, whoever owns them. */
const FIFO = `WITH free AS (
         SELECT id, next_attempt_at FROM jobs WHERE waiting_for IS NULL AND ${DUE}
          ORDER BY next_attempt_at LIMIT $1 FOR UPDATE SKIP LOCKED
       ), waiting AS (
         SELECT w.id, w.next_attempt_at FROM unnest($2::text[], $3::int[]) AS q(provider, room)
          CROSS JOIN LATERAL (
            SELECT id, next_attempt_at FROM jobs WHERE waiting_for = q.provider AND ${DUE}
             ORDER BY next_attempt_at LIMIT q.room FOR UPDATE SKIP LOCKED
          ) w
       ), picked AS (
         SELECT id FROM (SELECT * FROM free UNION ALL SELECT * FROM waiting) x ORDER BY next_attempt_at LIMIT $1
       )
       SELECT ${COLUMNS} FROM jobs j WHERE j.id IN (SELECT id FROM picked) ORDER BY j.next_attempt_at`;

export interface ClaimRow {
  owners: number;
  statement: 'fifo (before fair share)' | 'CLAIM_SOLE' | 'CLAIM_DUE' | 'CLAIM_SOLE then CLAIM_DUE';
  rows: number;
  named: { p50: number; p99: number };
  /** Named, after `SET LOCAL plan_cache_mode = force_generic_plan` in the transaction (its round trip counted). */
  generic: { p50: number; p99: number };
  unnamed: { p50: number; p99: number };
}

async function seed(pool: pg.Pool, owners: number): Promise<void> {
  await pool.query(`DELETE FROM jobs WHERE owner_id LIKE 'claim-bench-%'`);
  await pool.query(
    `INSERT INTO jobs (owner_id, idempotency_key, fingerprint, operation, input, providers, next_attempt_at)
     SELECT 'claim-bench-' || (i % $1), 'k' || i, 'f', 'summarize', '{}'::jsonb, '{}'::text[],
            now() - interval '1 hour' + i * interval '1 ms'
       FROM generate_series(1, $2) i`,
    [owners, JOBS],
  );
  // And 2,000 in flight, each with its deadline ahead (as while calls run): in the due indexes, but not due.
  await pool.query(
    `INSERT INTO jobs (owner_id, idempotency_key, fingerprint, operation, input, providers, status, next_attempt_at)
     SELECT 'claim-bench-' || (i % $1), 'r' || i, 'f', 'summarize', '{}'::jsonb, '{}'::text[], 'running',
            now() + interval '1 hour' + i * interval '1 ms'
       FROM generate_series(1, 2000) i`,
    [owners],
  );
  await pool.query('VACUUM ANALYZE jobs');
}

export async function claimCase(pool: pg.Pool): Promise<ClaimRow[]> {
  // Only this case's jobs are due.
  await pool.query('UPDATE jobs SET next_attempt_at = NULL WHERE next_attempt_at IS NOT NULL');
  const client = await pool.connect();
  const rows: ClaimRow[] = [];
  try {
    for (const owners of [1, 300]) {
      await seed(pool, owners);
      const statements: Array<[ClaimRow['statement'], string[]]> = [
        ['fifo (before fair share)', [FIFO]],
        ['CLAIM_SOLE', [CLAIM_SOLE.text]],
        ['CLAIM_DUE', [CLAIM_DUE.text]],
      ];
      if (owners > 1) statements[1] = ['CLAIM_SOLE then CLAIM_DUE', [CLAIM_SOLE.text, CLAIM_DUE.text]];
      const times = statements.map(() => ({
        named: [] as number[],
        generic: [] as number[],
        unnamed: [] as number[],
        rows: 0,
      }));
      for (let run = 0; run < RUNS; run++) {
        for (const [i, [, texts]] of statements.entries()) {
          for (const mode of ['named', 'generic', 'unnamed'] as const) {
            await client.query('BEGIN');
            const started = process.hrtime.bigint();
            let found = 0;
            if (mode === 'generic') await client.query('SET LOCAL plan_cache_mode = force_generic_plan');
            for (const text of texts) {
              const name = mode === 'unnamed' ? undefined : (statementName(text) ?? `claim_bench_${i}`);
              found = (await client.query({ name, text, values: ARGS })).rowCount ?? 0;
            }
            // The first 10 runs warm the caches (and let PostgreSQL make its plan choice).
            if (run >= 10) times[i][mode].push(Number(process.hrtime.bigint() - started) / 1e6);
            times[i].rows = found;
            await client.query('ROLLBACK');
          }
        }
      }
      for (const [i, [statement]] of statements.entries()) {
        const ms = (values: number[]) => {
          const sorted = [...values].sort((a, b) => a - b);
          const at = (p: number) => Math.round(sorted[Math.floor(p * (sorted.length - 1))] * 100) / 100;
          return { p50: at(0.5), p99: at(0.99) };
        };
        rows.push({
          owners,
          statement,
          rows: times[i].rows,
          named: ms(times[i].named),
          generic: ms(times[i].generic),
          unnamed: ms(times[i].unnamed),
        });
      }
    }
  } finally {
    client.release();
    await pool.query(`DELETE FROM jobs WHERE owner_id LIKE 'claim-bench-%'`);
  }
  return rows;
}

export function claimTable(rows: ClaimRow[]): string {
  return [
    '| owners with due work | statement | rows | named p50 / p99 ms | named, generic plan p50 / p99 ms | unnamed p50 / p99 ms |',
    '|---:|---|---:|---:|---:|---:|',
    ...rows.map(
      (r) =>
        `| ${r.owners} | ${r.statement} | ${r.rows} | ${r.named.p50} / ${r.named.p99} | ${r.generic.p50} / ${r.generic.p99} | ${r.unnamed.p50} / ${r.unnamed.p99} |`,
    ),
  ].join('\n');
}
