/**
 * `history` and `retention`: the hot path over a long history, and the purge of one old day of it under load.
 *
 * history: the same measurements on an empty database and on one holding `--history-jobs` terminal jobs (10 million
 * by default, seeded in SQL: bench/history-seed.ts), then on an empty one again (the two empty runs bracket the
 * machine's noise): 10,000 creates over HTTP (ROLE=api, 32 connections: req/s, p50, p99), the claim alone on the
 * 10,000 due jobs they left (the ledger's claim of 64, in transactions rolled back: p50), those jobs drained by a
 * ROLE=all process, then the pipeline (creates for --duration seconds with the workers on: settled/s). Each run's
 * plans of the hot statements (EXPLAIN (ANALYZE, BUFFERS)) go to bench/results/history-plans-<label>.txt.
 *
 * retention: on the seeded database, ROLE=api and ROLE=worker processes, creates at 200/s (20 s to warm up, not
 * counted): create p50/p99 for 60 s without a purge, then with a worker whose JOB_RETENTION_DAYS makes the oldest of the ten days due (a tenth of the history),
 * until it is gone: p50/p99 during the purge, how long it took, jobs purged per second.
 */
import type { ChildProcess } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';

import autocannon from 'autocannon';
import pg from 'pg';

import type { Queryable } from '../src/database/transactions.js';
import { JobsRepository } from '../src/ledger/jobs.repository.js';
import { CLAIM_DUE, FIND_OWNED_BY_KEY, INSERT_JOB } from '../src/ledger/jobs.sql.js';
import { TOP_OWNERS } from '../src/metrics/backlog.sql.js';
import { ALLOW_PURGE, PURGE_BATCH } from '../src/retention/retention.sql.js';
import { dropDatabase, freshDatabase } from './databases.js';
import { seedHistory, type SeedResult, tableSizesMb } from './history-seed.js';
import { pacedCreates, sleep } from './load.js';

interface Service {
  child: ChildProcess;
  url: string;
  stop: () => Promise<void>;
}

export interface HistoryContext {
  /** A connection to the server, to create and drop the case's databases. */
  admin: pg.Client;
  /** The server's URL: the case's databases are made beside the bench's. */
  serverUrl: string;
  historyJobs: number;
  duration: number;
  connections: number;
  run: string;
  startService: (
    databaseUrl: string,
    role: 'api' | 'worker' | 'all',
    extraEnv?: Record<string, string>,
  ) => Promise<Service>;
  createKey: (databaseUrl: string, owner: string, scopes: string) => string;
  log: (line: string) => void;
}

export interface HistoryRow {
  database: string;
  historyJobs: number;
  create: { rps: number; p50: number; p99: number; non2xx: number };
  claimMs: { fair: { p50: number; p99: number }; sole: { p50: number; p99: number } };
  drainPerSecond: number;
  pipeline: { created: number; settledPerSecond: number };
  sizesMb: Record<string, number>;
}

export interface RetentionRow {
  historyJobs: number;
  rate: number;
  before: { creates: number; p50: number; p99: number; failed: number };
  during: { creates: number; p50: number; p99: number; failed: number };
  purged: number;
  purgeSeconds: number;
  purgedPerSecond: number;
  p99Ratio: number;
}

export interface HistoryResult {
  seed?: SeedResult;
  rows: HistoryRow[];
  retention?: RetentionRow;
}

/** The history spans this many days, completed evenly; the retention case purges the oldest one. */
const DAYS = 10;
const CREATES = 10_000;
const CLAIM_RUNS = 200;
const RATE = 200;
const WARM_UP_SECONDS = 20;
const BASELINE_SECONDS = 60;
const PURGE_LIMIT_SECONDS = 1800;

function manager(client: pg.ClientBase): Queryable {
  return { query: async (sql: string, params?: unknown[]) => (await client.query(sql, params)).rows } as Queryable;
}

async function until(check: () => Promise<boolean>, timeoutMs: number, what: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`history: ${what} did not happen in time`);
    await sleep(200);
  }
}

const ms = (values: number[]) => {
  const sorted = [...values].sort((a, b) => a - b);
  const at = (p: number) => Math.round(sorted[Math.floor(p * (sorted.length - 1))] * 100) / 100;
  return { p50: at(0.5), p99: at(0.99) };
};

/** The ledger's claim of 64 on the due jobs, each in a transaction rolled back: nothing changes between runs. */
async function claimTimes(pool: pg.Pool, sole: boolean): Promise<{ p50: number; p99: number }> {
  const jobs = new JobsRepository(pool as never);
  const client = await pool.connect();
  const times: number[] = [];
  try {
    for (let i = 0; i < CLAIM_RUNS + 10; i++) {
      await client.query('BEGIN');
      const t0 = performance.now();
      const claim = await jobs.claimDue(64, { providers: [], rooms: [] }, manager(client), sole);
      if (i >= 10) times.push(performance.now() - t0);
      await client.query('ROLLBACK');
      if (claim.jobs.length !== 64) throw new Error(`history: a claim took ${claim.jobs.length} jobs, not 64`);
    }
  } finally {
    client.release();
  }
  return ms(times);
}

/** The hot statements' plans on this database, for docs/benchmarks.md#history. */
async function plans(pool: pg.Pool, label: string, oldKey: string): Promise<void> {
  const client = await pool.connect();
  const out: string[] = [];
  const explain = async (title: string, sql: string, params: unknown[], setup?: string) => {
    await client.query('BEGIN');
    try {
      if (setup) await client.query(setup);
      const { rows } = await client.query<{ 'QUERY PLAN': string }>(
        `EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF, SUMMARY ON) ${sql}`,
        params,
      );
      out.push(`-- ${title}`, ...rows.map((r) => r['QUERY PLAN']), '');
    } finally {
      await client.query('ROLLBACK');
    }
  };
  try {
    await explain('insert_job (a create)', INSERT_JOB.text, [
      'bench',
      `plan-${Date.now()}`,
      'f'.repeat(64),
      'summarize',
      '{"text":"plan"}',
      ['bench-zero'],
      null,
      null,
      0,
    ]);
    await explain(`find_owned_job_by_key (a replay's read, key ${oldKey})`, FIND_OWNED_BY_KEY.text, ['bench', oldKey]);
    await explain('claim_due (window 64, the fair claim)', CLAIM_DUE.text, [64, [], []]);
    await explain('backlog_top_owners (the metrics sampler)', TOP_OWNERS.text, [20]);
    await explain('purge_batch (500 jobs older than 9 days)', PURGE_BATCH.text, [9, 500], ALLOW_PURGE.text);
  } finally {
    client.release();
  }
  mkdirSync('bench/results', { recursive: true });
  writeFileSync(`bench/results/history-plans-${label.replace(/\W+/g, '-')}.txt`, `${out.join('\n')}\n`);
}

/** POST /v1/jobs over `connections`, a new key each: `amount` of them, or for `duration` seconds. */
function creates(
  url: string,
  connections: number,
  headers: Record<string, string>,
  prefix: string,
  bound: { amount: number } | { duration: number },
): Promise<autocannon.Result> {
  let i = 0;
  return autocannon({
    url,
    connections,
    ...bound,
    requests: [
      {
        method: 'POST',
        setupRequest: (req: autocannon.Request) => ({
          ...req,
          path: '/v1/jobs',
          headers: { ...headers, 'idempotency-key': `${prefix}-${i++}` },
          body: JSON.stringify({ operation: 'summarize', input: { text: prefix } }),
        }),
      },
    ],
  });
}

async function measure(
  ctx: HistoryContext,
  databaseUrl: string,
  label: string,
  historyJobs: number,
): Promise<HistoryRow> {
  const key = ctx.createKey(databaseUrl, 'bench', 'jobs:write,jobs:read');
  const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };
  const pool = new pg.Pool({ connectionString: databaseUrl, max: 4 });
  pool.on('error', () => undefined); // idle clients dropped by DROP DATABASE ... WITH (FORCE)
  const live = async () =>
    (
      await pool.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM jobs WHERE owner_id = 'bench' AND status IN ('pending', 'running')`,
      )
    ).rows[0].n;
  try {
    await pool.query('CHECKPOINT');
    let service = await ctx.startService(databaseUrl, 'api');
    const created = await creates(service.url, ctx.connections, headers, 'history-create', { amount: CREATES });
    await service.stop();
    const create = {
      rps: Math.round(created.requests.average),
      p50: created.latency.p50,
      p99: created.latency.p99,
      non2xx: created.non2xx,
    };
    ctx.log(`history ${label}: ${CREATES} creates, ${create.rps} req/s, p50 ${create.p50} ms, p99 ${create.p99} ms`);
    const claimMs = { fair: await claimTimes(pool, false), sole: await claimTimes(pool, true) };
    ctx.log(`history ${label}: claim p50 ${claimMs.fair.p50} ms (sole ${claimMs.sole.p50} ms)`);
    await plans(pool, label, historyJobs ? 'history-10' : 'history-create-0');

    service = await ctx.startService(databaseUrl, 'all');
    const drainStarted = Date.now();
    await until(async () => (await live()) === 0, 600_000, 'the drain');
    const drainPerSecond = Math.round(CREATES / ((Date.now() - drainStarted) / 1000));
    const started = new Date();
    const load = await creates(service.url, ctx.connections, headers, 'history-pipe', { duration: ctx.duration });
    await until(async () => (await live()) === 0, 600_000, 'the pipeline');
    await service.stop();
    const settled = (
      await pool.query<{ n: number; last: Date }>(
        `SELECT count(*)::int AS n, max(completed_at) AS last FROM jobs
          WHERE owner_id = 'bench' AND status = 'succeeded' AND created_at >= $1`,
        [started],
      )
    ).rows[0];
    const pipeline = {
      created: load['2xx'],
      settledPerSecond: Math.round(settled.n / ((settled.last.getTime() - started.getTime()) / 1000)),
    };
    ctx.log(`history ${label}: drain ${drainPerSecond}/s, pipeline ${pipeline.settledPerSecond} settled/s`);
    const sizesMb = await tableSizesMb(pool);
    const { rows } = await pool.query<{ mb: number }>(
      `SELECT round(pg_relation_size('"UQ_jobs_owner_idempotency_key"') / 1048576.0)::int AS mb`,
    );
    sizesMb['UQ_jobs_owner_idempotency_key'] = rows[0].mb;
    return { database: label, historyJobs, create, claimMs, drainPerSecond, pipeline, sizesMb };
  } finally {
    await pool.end();
  }
}

async function retention(ctx: HistoryContext, databaseUrl: string, historyJobs: number): Promise<RetentionRow> {
  const key = ctx.createKey(databaseUrl, 'bench', 'jobs:write,jobs:read');
  const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };
  const pool = new pg.Pool({ connectionString: databaseUrl, max: 2 });
  pool.on('error', () => undefined); // idle clients dropped by DROP DATABASE ... WITH (FORCE)
  const olderThan = DAYS - 1;
  const api = await ctx.startService(databaseUrl, 'api');
  let worker = await ctx.startService(databaseUrl, 'worker', { JOB_RETENTION_DAYS: '0' });
  try {
    await pool.query('CHECKPOINT');
    const phase = async (prefix: string, seconds: number, stop?: () => boolean) => {
      const latencies: number[] = [];
      const { sent, failed } = await pacedCreates(api.url, headers, {
        prefix: `${prefix}-${ctx.run}`,
        rate: RATE,
        seconds,
        stop,
        provider: 'bench-zero',
        text: 'retention',
        onLatency: (ms) => latencies.push(ms),
      });
      const { p50, p99 } = ms(latencies);
      return { creates: sent, p50, p99, failed };
    };
    // Fresh processes answer their first seconds slowly (connections, plans, JIT): not the purge's doing.
    await phase('retention-warm-up', WARM_UP_SECONDS);
    const before = await phase('retention-before', BASELINE_SECONDS);
    ctx.log(`retention: ${RATE}/s without a purge: p50 ${before.p50} ms, p99 ${before.p99} ms`);
    await worker.stop();
    // The day to purge is fixed now: jobs go on crossing the retention line (a tenth of the history a day) while it runs.
    const cutoff = (await pool.query<{ at: Date }>(`SELECT now() - $1 * interval '1 day' AS at`, [olderThan])).rows[0]
      .at;
    const old = async () =>
      (await pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM jobs WHERE completed_at < $1`, [cutoff])).rows[0]
        .n;
    const due = await old();
    // The first sweep starts 5 s after the worker is up: its start-up is over by then.
    worker = await ctx.startService(databaseUrl, 'worker', {
      JOB_RETENTION_DAYS: String(olderThan),
      RETENTION_INTERVAL_MS: '5000',
    });
    let done = false;
    let purgeStarted = 0;
    let purgeEnded = 0;
    const watch = (async () => {
      const deadline = Date.now() + PURGE_LIMIT_SECONDS * 1000;
      while (!done && Date.now() < deadline) {
        await sleep(2000);
        const left = await pool.query<{ left: boolean }>(
          `SELECT EXISTS (SELECT 1 FROM jobs WHERE completed_at < $1) AS left`,
          [cutoff],
        );
        const n = (
          await pool.query<{ n: number }>(`SELECT n_tup_del::int AS n FROM pg_stat_user_tables WHERE relname = 'jobs'`)
        ).rows[0].n;
        if (!purgeStarted && n > 0) purgeStarted = Date.now();
        if (!left.rows[0].left) {
          purgeEnded = Date.now();
          done = true;
        }
      }
      done = true;
    })();
    const during = await phase('retention-during', PURGE_LIMIT_SECONDS, () => done);
    await watch;
    const purged = due - (await old());
    const purgeSeconds = Math.round(((purgeEnded || Date.now()) - (purgeStarted || Date.now())) / 100) / 10;
    ctx.log(
      `retention: ${purged} jobs purged in ${purgeSeconds} s; ${RATE}/s meanwhile: p50 ${during.p50} ms, p99 ${during.p99} ms`,
    );
    return {
      historyJobs,
      rate: RATE,
      before,
      during,
      purged,
      purgeSeconds,
      purgedPerSecond: Math.round(purged / Math.max(0.1, purgeSeconds)),
      p99Ratio: Math.round((during.p99 / before.p99) * 100) / 100,
    };
  } finally {
    await worker.stop();
    await api.stop();
    await pool.end();
  }
}

export async function historyCase(
  ctx: HistoryContext,
  which: { history: boolean; retention: boolean },
): Promise<HistoryResult> {
  const result: HistoryResult = { rows: [] };
  const made: string[] = [];
  try {
    if (which.history) {
      const empty = await freshDatabase(ctx, 'history', 'empty');
      made.push(empty);
      result.rows.push(await measure(ctx, empty, 'empty', 0));
      await dropDatabase(ctx, empty);
    }
    const seeded = await freshDatabase(ctx, 'history', 'seeded');
    made.push(seeded);
    result.seed = await seedHistory(seeded, ctx.historyJobs, DAYS, ctx.log);
    ctx.log(`history: ${ctx.historyJobs.toLocaleString('en')} jobs seeded in ${result.seed.seconds} s`);
    if (which.history) result.rows.push(await measure(ctx, seeded, 'seeded', ctx.historyJobs));
    if (which.retention) result.retention = await retention(ctx, seeded, ctx.historyJobs);
    await dropDatabase(ctx, seeded);
    if (which.history) {
      const again = await freshDatabase(ctx, 'history', 'empty2');
      made.push(again);
      result.rows.push(await measure(ctx, again, 'empty, again', 0));
    }
  } finally {
    for (const url of made) await dropDatabase(ctx, url);
  }
  return result;
}

export function historyTable(result: HistoryResult): string {
  const empties = result.rows.filter((r) => r.historyJobs === 0);
  const mean = (f: (r: HistoryRow) => number) => empties.reduce((a, r) => a + f(r), 0) / Math.max(1, empties.length);
  const ratio = (r: HistoryRow, f: (r: HistoryRow) => number) => (empties.length ? (f(r) / mean(f)).toFixed(2) : '');
  const lines = [
    '| database | history jobs | create req/s | create p50 / p99 ms | claim p50 ms (fair / sole) | drain settled/s | pipeline settled/s | jobs + indexes MB | events + indexes MB | UQ (owner, key) MB |',
    '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
    ...result.rows.map(
      (r) =>
        `| ${r.database} | ${r.historyJobs.toLocaleString('en')} | ${r.create.rps} | ${r.create.p50} / ${r.create.p99} | ${r.claimMs.fair.p50} / ${r.claimMs.sole.p50} | ${r.drainPerSecond} | ${r.pipeline.settledPerSecond} | ${r.sizesMb.jobs} + ${r.sizesMb['jobs indexes']} | ${r.sizesMb.job_events} + ${r.sizesMb['job_events indexes']} | ${r.sizesMb.UQ_jobs_owner_idempotency_key} |`,
    ),
  ];
  for (const r of result.rows.filter((x) => x.historyJobs > 0)) {
    lines.push(
      `| seeded ÷ mean of empty | | ${ratio(r, (x) => x.create.rps)} | ${ratio(r, (x) => x.create.p50)} / ${ratio(r, (x) => x.create.p99)} | ${ratio(r, (x) => x.claimMs.fair.p50)} / ${ratio(r, (x) => x.claimMs.sole.p50)} | ${ratio(r, (x) => x.drainPerSecond)} | ${ratio(r, (x) => x.pipeline.settledPerSecond)} | | | |`,
    );
  }
  if (result.seed) {
    const s = result.seed;
    lines.push(
      '',
      `seeded ${s.jobs.toLocaleString('en')} terminal jobs in ${s.seconds} s (rows ${Math.round(s.steps.insert)} s, indexes and keys ${Math.round(s.steps.indexes)} s, VACUUM (FREEZE, ANALYZE) ${Math.round(s.steps.vacuum)} s)`,
    );
  }
  return lines.join('\n');
}

export function retentionTable(r: RetentionRow): string {
  return [
    `| history jobs | creates/s | phase | creates | p50 ms | p99 ms | failed |`,
    '|---:|---:|---|---:|---:|---:|---:|',
    `| ${r.historyJobs.toLocaleString('en')} | ${r.rate} | no purge | ${r.before.creates} | ${r.before.p50} | ${r.before.p99} | ${r.before.failed} |`,
    `| | | purging ${r.purged.toLocaleString('en')} jobs (${r.purgeSeconds} s, ${r.purgedPerSecond} jobs/s) | ${r.during.creates} | ${r.during.p50} | ${r.during.p99} | ${r.during.failed} |`,
    '',
    `create p99 during the purge ÷ without: ${r.p99Ratio}`,
  ].join('\n');
}
