/**
 * `claim-owners` and `drain-owners` (issue 34): what the claim costs as the number of owners with due work grows.
 *
 * claim-owners: a database of its own with the migrations, due jobs seeded by SQL (owners × due jobs each), the
 * ledger's fair claim (JobsRepository.claimDue: claim_due, docs/sql/jobs.sql) with a window of 64 and no waiting
 * sets, each run in a transaction rolled back: p50 of 7 runs (after 2 not counted, which warm the caches).
 *
 * drain-owners: one ROLE=worker process (default concurrency) on bench-zero (a simulated provider that answers at
 * once), 100,000 due jobs of one owner, then 100,000 over 20,000 owners (5 each), each on a database of its own:
 * jobs/s from the moment they were made due to the last one's settlement.
 */
import type { ChildProcess } from 'node:child_process';

import pg from 'pg';

import type { Queryable } from '../src/database/transactions.js';
import { JobsRepository } from '../src/ledger/jobs.repository.js';
import { processCpuSeconds } from './cpu.js';
import { dropDatabase, freshDatabase } from './databases.js';
import { sleep } from './load.js';
import { type DrainCost, DrainMeter, type ServerProbe } from './server-counters.js';

interface Service {
  child: ChildProcess;
  url: string;
  stop: () => Promise<void>;
}

export interface OwnersContext extends ServerProbe {
  admin: pg.Client;
  serverUrl: string;
  run: string;
  startService: (
    databaseUrl: string,
    role: 'api' | 'worker' | 'all',
    extraEnv?: Record<string, string>,
  ) => Promise<Service>;
  log: (line: string) => void;
}

export interface ClaimOwnersRow {
  owners: number;
  dueEach: number;
  rows: number;
  claimed: number;
  p50: number;
  runsMs: number[];
}

export interface DrainOwnersRow {
  owners: number;
  jobs: number;
  seconds: number;
  /** Settled by the end: `jobs`, or fewer when the drain was cut at DRAIN_LIMIT_S. */
  settled: number;
  jobsPerSecond: number;
  cost: DrainCost;
}

const CLAIM_SHAPES: Array<[owners: number, dueEach: number]> = [
  [1, 100_000],
  [10, 1_000],
  [100, 1_000],
  [1_000, 100],
  [10_000, 100],
  [30_000, 10],
];
const CLAIM_RUNS = 7;
export const DRAIN_JOBS = 100_000;
export const DRAIN_SHAPES = [1, 20_000];
const DRAIN_LIMIT_S = 900;

/**
 * `owners × each` jobs of owners `own-0 …`, in one INSERT (the way a backlog of creates would leave them: pending,
 * oldest first), due `dueIn` from now (negative: already due). Then VACUUM ANALYZE of the jobs and the owner queue
 * their triggers filled, as autovacuum would have by then.
 */
async function seed(pool: pg.Pool, owners: number, each: number, dueIn: string): Promise<void> {
  await pool.query(
    `INSERT INTO jobs (owner_id, idempotency_key, fingerprint, operation, input, providers, next_attempt_at, created_at)
     SELECT 'own-' || (i % $1), 'k-' || i, repeat('f', 64), 'summarize', '{"text":"owners"}'::jsonb, '{bench-zero}',
            now() + $3::interval + i * interval '1 microsecond', now() - interval '1 hour' + i * interval '1 microsecond'
       FROM generate_series(0, $2::int - 1) i`,
    [owners, owners * each, dueIn],
  );
  await pool.query('VACUUM ANALYZE jobs, owner_queue');
}

function manager(client: pg.ClientBase): Queryable {
  return { query: async (sql: string, params?: unknown[]) => (await client.query(sql, params)).rows } as Queryable;
}

export async function claimOwnersCase(ctx: OwnersContext): Promise<ClaimOwnersRow[]> {
  const databaseUrl = await freshDatabase(ctx, 'owners', 'claim');
  const pool = new pg.Pool({ connectionString: databaseUrl, max: 2 });
  pool.on('error', () => undefined);
  const jobs = new JobsRepository(pool as never);
  const rows: ClaimOwnersRow[] = [];
  try {
    for (const [owners, each] of CLAIM_SHAPES) {
      // The owner queue's rows go with the jobs (no key ties them).
      await pool.query('TRUNCATE jobs, owner_queue CASCADE');
      const seeded = Date.now();
      await seed(pool, owners, each, '-1 hour');
      ctx.log(`claim-owners: ${owners} × ${each} seeded in ${((Date.now() - seeded) / 1000).toFixed(1)} s`);
      const client = await pool.connect();
      const times: number[] = [];
      let claimed = 0;
      try {
        for (let run = 0; run < CLAIM_RUNS + 2; run++) {
          await client.query('BEGIN');
          const t0 = performance.now();
          const claim = await jobs.claimDue(64, { providers: [], rooms: [] }, manager(client), false);
          const elapsed = performance.now() - t0;
          await client.query('ROLLBACK');
          if (run >= 2) times.push(elapsed);
          claimed = claim.jobs.length;
        }
      } finally {
        client.release();
      }
      const sorted = [...times].sort((a, b) => a - b);
      const row = {
        owners,
        dueEach: each,
        rows: owners * each,
        claimed,
        p50: Math.round(sorted[Math.floor(sorted.length / 2)] * 10) / 10,
        runsMs: times.map((t) => Math.round(t * 10) / 10),
      };
      ctx.log(`claim-owners: ${owners} × ${each}: p50 ${row.p50} ms, ${claimed} claimed`);
      rows.push(row);
    }
  } finally {
    await pool.end();
    await dropDatabase(ctx, databaseUrl);
  }
  return rows;
}

/**
 * One drain of DRAIN_JOBS jobs over `owners` owners by one ROLE=worker process, on a database of its own; what it
 * cost the server and the worker (server-counters.ts) beside. `label` names the database and the log lines.
 */
export async function drainOnejob(ctx: OwnersContext, owners: number, label = 'drain-owners'): Promise<DrainOwnersRow> {
  const databaseUrl = await freshDatabase(ctx, 'owners', `${label}_${owners}`);
  const pool = new pg.Pool({ connectionString: databaseUrl, max: 2 });
  pool.on('error', () => undefined);
  let worker: Service | undefined;
  let cut = false;
  try {
    // Not due yet: the worker starts on an idle queue; then they all become due at once.
    await seed(pool, owners, DRAIN_JOBS / owners, '1 day');
    worker = await ctx.startService(databaseUrl, 'worker');
    // A second and a half of quiet: the seeding's counts are published (server-counters.ts).
    await sleep(1500);
    const pid = worker.child.pid!;
    const meter = await DrainMeter.start(ctx, databaseUrl, () => processCpuSeconds(pid));
    // They become due in one UPDATE, with no ANALYZE after: the statistics still say every job is a day ahead, as
    // they would for a backlog that falls due by time passing, which autovacuum has no reason to analyze again. The
    // claim must not depend on them (the loose scan of 9690f6a walked every due job per owner on such statistics:
    // a claim of over a minute at 20,000 owners; the owner queue's reads keep the time out of their index
    // conditions). The drain is timed from the commit.
    const client = await pool.connect();
    let made: { n: number; at: Date };
    try {
      await client.query('BEGIN');
      const { rows: u } = await client.query<{ n: number }>(
        `WITH u AS (
           UPDATE jobs SET next_attempt_at = now() - interval '1 hour' + (next_attempt_at - now() - interval '1 day')
            WHERE status = 'pending' RETURNING 1
         ) SELECT count(*)::int AS n FROM u`,
      );
      await client.query('COMMIT');
      const { rows: at } = await client.query<{ at: Date }>('SELECT clock_timestamp() AS at');
      made = { n: u[0].n, at: at[0].at };
    } finally {
      client.release();
    }
    const started = made.at;
    // The bench's own statements meanwhile: the UPDATE and the clock read above, the polls below and the last read;
    // and their transactions.
    let sent = 2;
    let transactions = 2;
    // Past the limit the drain is cut short: the row says how many settled by then, and the case goes on.
    const deadline = Date.now() + DRAIN_LIMIT_S * 1000;
    // While jobs are due, a probe of the due index's first entry; then the count of the last ones in flight. (A count
    // of the 100,000 rows every 200 ms throughout took a fifth of the server's time at 20,000 owners.)
    for (let probing = true; ;) {
      sent++;
      const { rows: live } = await pool.query<{ n: number }>(
        probing
          ? `SELECT count(*)::int AS n FROM (SELECT 1 FROM jobs WHERE next_attempt_at IS NOT NULL AND waiting_for IS NULL LIMIT 1) d`
          : `SELECT count(*)::int AS n FROM jobs WHERE status IN ('pending', 'running', 'unknown')`,
      );
      if (live[0].n === 0) {
        if (!probing) break;
        probing = false;
        continue;
      }
      if (Date.now() > deadline) {
        cut = true;
        break;
      }
      await sleep(probing ? 200 : 50);
    }
    meter.stopCpu();
    sent++;
    transactions++;
    const { rows: last } = await pool.query<{ at: Date; now: Date; settled: number; failed: number }>(
      `SELECT max(completed_at) AS at, now() AS now, count(*) FILTER (WHERE status = 'succeeded')::int AS settled,
              count(*) FILTER (WHERE status NOT IN ('succeeded', 'pending', 'running', 'unknown'))::int AS failed
         FROM jobs`,
    );
    const { at, now, settled, failed } = last[0];
    if (failed) throw new Error(`${label}: ${failed} jobs did not succeed`);
    await sleep(1500);
    const cost = await meter.cost(settled, { statements: sent, transactions, rowsWritten: made.n });
    const seconds = ((cut ? now : at).getTime() - started.getTime()) / 1000;
    const row = { owners, jobs: DRAIN_JOBS, settled, seconds, jobsPerSecond: Math.round(settled / seconds), cost };
    ctx.log(
      `${label}: onejob, ${owners} owners: ${row.jobsPerSecond} jobs/s (${settled} settled in ${seconds.toFixed(1)} s${cut ? ', cut at the limit' : ''})`,
    );
    return row;
  } finally {
    // A cut drain may leave claims running for minutes, which the worker's shutdown would wait for.
    if (cut) {
      const { rows: running } = await ctx.admin.query<{ s: number; query: string }>(
        `SELECT extract(epoch FROM now() - query_start)::int AS s, left(regexp_replace(query, '\\s+', ' ', 'g'), 60) AS query
           FROM pg_stat_activity WHERE datname = $1 AND state = 'active' ORDER BY query_start`,
        [new URL(databaseUrl).pathname.slice(1)],
      );
      for (const r of running) ctx.log(`${label}: at the cut, running for ${r.s} s: ${r.query}`);
      await ctx.admin.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1', [
        new URL(databaseUrl).pathname.slice(1),
      ]);
    }
    await worker?.stop();
    await pool.end();
    await dropDatabase(ctx, databaseUrl);
  }
}

export async function drainOwnersCase(ctx: OwnersContext): Promise<DrainOwnersRow[]> {
  const rows: DrainOwnersRow[] = [];
  for (const owners of DRAIN_SHAPES) rows.push(await drainOnejob(ctx, owners));
  return rows;
}

export function claimOwnersTable(rows: ClaimOwnersRow[]): string {
  return [
    '| owners with due work | due jobs each | rows | claimed | claim p50 ms |',
    '|---:|---:|---:|---:|---:|',
    ...rows.map(
      (r) =>
        `| ${r.owners.toLocaleString('en')} | ${r.dueEach.toLocaleString('en')} | ${r.rows.toLocaleString('en')} | ${r.claimed} | ${r.p50} |`,
    ),
  ].join('\n');
}

/** `100,000`, or `52,544 of 100,000 (cut)` when the drain was cut at its limit. */
export function settledOf(r: { jobs: number; settled: number }): string {
  return r.settled === r.jobs
    ? r.jobs.toLocaleString('en')
    : `${r.settled.toLocaleString('en')} of ${r.jobs.toLocaleString('en')} (cut at ${DRAIN_LIMIT_S} s)`;
}

export function drainOwnersTable(rows: DrainOwnersRow[]): string {
  const one = rows.find((r) => r.owners === 1);
  return [
    '| owners | due jobs | seconds | jobs/s | of 1 owner |',
    '|---:|---:|---:|---:|---:|',
    ...rows.map(
      (r) =>
        `| ${r.owners.toLocaleString('en')} | ${settledOf(r)} | ${r.seconds.toFixed(1)} | ${r.jobsPerSecond} | ${one ? `${(r.jobsPerSecond / one.jobsPerSecond).toFixed(2)}×` : ''} |`,
    ),
  ].join('\n');
}
