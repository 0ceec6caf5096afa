/**
 * `soak`: the service run for --soak-minutes (30) at a steady 200 creates/s on a provider that answers in 1 s, as
 * two processes (ROLE=api, ROLE=worker), with retention at a short age (--soak-retention-minutes, 5) swept every
 * 30 s, so history comes and goes as it would over months. Every 30 s: each role's RSS, the ledger's table and index
 * sizes and dead tuples, autovacuum runs so far, and the creates' p99 in that window. Targets (docs/benchmarks.md):
 * each role's RSS within 10 % of its value at a sixth of the run (minute 5 of 30) for the last two thirds (the last
 * 20 minutes) and below 300 MB; table sizes bounded.
 */
import type { ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';

import pg from 'pg';

import { pacedCreates, sleep } from './load.js';

interface Service {
  child: ChildProcess;
  url: string;
  stop: () => Promise<void>;
}

export interface SoakContext {
  databaseUrl: string;
  minutes: number;
  retentionMinutes: number;
  run: string;
  /** An API key of the bench's owner, made once the API process has applied the migrations. */
  createKey: () => string;
  startService: (role: 'api' | 'worker', extraEnv: Record<string, string>) => Promise<Service>;
  log: (line: string) => void;
}

export interface SoakSample {
  minute: number;
  apiRssMb: number;
  workerRssMb: number;
  /** Heap and indexes of jobs, attempts and job_events, MB. */
  tablesMb: Record<string, number>;
  indexesMb: Record<string, number>;
  deadTuples: Record<string, number>;
  autovacuums: number;
  autoanalyzes: number;
  creates: number;
  createP99Ms: number;
  /** Jobs not yet terminal: the backlog stays flat when the worker keeps up. */
  live: number;
  /** Terminal jobs kept (what retention has not purged yet). */
  kept: number;
}

export interface SoakResult {
  minutes: number;
  rate: number;
  retentionMinutes: number;
  samples: SoakSample[];
  failed: number;
  /** Per role: the value at a sixth of the run, and the largest distance from it over the last two thirds, in %. */
  rss: Record<'api' | 'worker', { reference: number; maxDriftPct: number; max: number }>;
  /** Per table (heap + indexes): the size at a third of the run and at the end, MB. */
  bounded: Record<string, { third: number; end: number }>;
}

const RATE = 200;
const SAMPLE_MS = 30_000;
const TABLES = ['jobs', 'attempts', 'job_events'];

function rssMb(child: ChildProcess): number {
  return Math.round(Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${child.pid}/status`, 'utf8'))![1]) / 1024);
}

export async function soakCase(ctx: SoakContext): Promise<SoakResult> {
  const pool = new pg.Pool({ connectionString: ctx.databaseUrl, max: 2 });
  pool.on('error', () => undefined); // idle clients dropped by DROP DATABASE ... WITH (FORCE)
  const api = await ctx.startService('api', {});
  const headers = { authorization: `Bearer ${ctx.createKey()}`, 'content-type': 'application/json' };
  const worker = await ctx.startService('worker', {
    JOB_RETENTION_DAYS: String(ctx.retentionMinutes / 1440),
    RETENTION_INTERVAL_MS: String(SAMPLE_MS),
  });
  const samples: SoakSample[] = [];
  let window: number[] = [];
  const started = Date.now();
  const sample = async () => {
    const sizes = await pool.query<{
      name: string;
      table_mb: number;
      indexes_mb: number;
      dead: number;
      autovacuums: number;
      autoanalyzes: number;
    }>(
      `SELECT c.relname AS name, round(pg_table_size(c.oid) / 1048576.0, 1)::float8 AS table_mb,
              round(pg_indexes_size(c.oid) / 1048576.0, 1)::float8 AS indexes_mb, s.n_dead_tup::int AS dead,
              s.autovacuum_count::int AS autovacuums, s.autoanalyze_count::int AS autoanalyzes
         FROM pg_class c JOIN pg_stat_user_tables s ON s.relid = c.oid WHERE c.relname = ANY ($1::text[])`,
      [TABLES],
    );
    const counts = await pool.query<{ live: number; kept: number }>(
      `SELECT count(*) FILTER (WHERE completed_at IS NULL)::int AS live,
              count(*) FILTER (WHERE completed_at IS NOT NULL)::int AS kept FROM jobs`,
    );
    const sorted = [...window].sort((a, b) => a - b);
    const byName = <K extends 'table_mb' | 'indexes_mb' | 'dead'>(k: K) =>
      Object.fromEntries(sizes.rows.map((r) => [r.name, r[k]]));
    samples.push({
      minute: Math.round((Date.now() - started) / 6000) / 10,
      apiRssMb: rssMb(api.child),
      workerRssMb: rssMb(worker.child),
      tablesMb: byName('table_mb'),
      indexesMb: byName('indexes_mb'),
      deadTuples: byName('dead'),
      autovacuums: sizes.rows.reduce((a, r) => a + r.autovacuums, 0),
      autoanalyzes: sizes.rows.reduce((a, r) => a + r.autoanalyzes, 0),
      creates: sorted.length,
      createP99Ms: sorted.length ? Math.round(sorted[Math.floor(0.99 * (sorted.length - 1))] * 10) / 10 : 0,
      ...counts.rows[0],
    });
    window = [];
    const s = samples.at(-1)!;
    ctx.log(
      `soak ${s.minute} min: RSS api ${s.apiRssMb} MB, worker ${s.workerRssMb} MB; jobs ${s.tablesMb.jobs} MB, ` +
        `events ${s.tablesMb.job_events} MB; p99 ${s.createP99Ms} ms; live ${s.live}, kept ${s.kept}`,
    );
  };
  let failed: number;
  try {
    let sampling = Promise.resolve();
    const timer = setInterval(() => (sampling = sampling.then(sample)), SAMPLE_MS);
    try {
      failed = (
        await pacedCreates(api.url, headers, {
          prefix: `soak-${ctx.run}`,
          rate: RATE,
          seconds: ctx.minutes * 60,
          provider: 'bench-1s',
          text: 'soak',
          onLatency: (ms) => window.push(ms),
        })
      ).failed;
    } finally {
      clearInterval(timer);
      await sampling;
    }
    await sleep(100);
  } finally {
    await worker.stop();
    await api.stop();
    await pool.end();
  }
  const at = (fraction: number) => samples[Math.max(0, Math.round(samples.length * fraction) - 1)];
  const reference = at(1 / 6);
  const tail = samples.slice(Math.floor(samples.length / 3));
  const rss = (k: 'apiRssMb' | 'workerRssMb') => ({
    reference: reference[k],
    maxDriftPct: Math.round(Math.max(...tail.map((s) => Math.abs(s[k] / reference[k] - 1))) * 1000) / 10,
    max: Math.max(...samples.map((s) => s[k])),
  });
  const total = (s: SoakSample, t: string) => Math.round((s.tablesMb[t] + s.indexesMb[t]) * 10) / 10;
  return {
    minutes: ctx.minutes,
    rate: RATE,
    retentionMinutes: ctx.retentionMinutes,
    samples,
    failed,
    rss: { api: rss('apiRssMb'), worker: rss('workerRssMb') },
    bounded: Object.fromEntries(TABLES.map((t) => [t, { third: total(at(1 / 3), t), end: total(samples.at(-1)!, t) }])),
  };
}

export function soakTable(r: SoakResult): string {
  const lines = [
    '| minute | RSS api MB | RSS worker MB | jobs MB (heap + idx) | attempts MB | job_events MB | dead tuples jobs / attempts / events | autovacuums (analyzes) | creates | create p99 ms | live | kept |',
    '|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
    ...r.samples.map(
      (s) =>
        `| ${s.minute} | ${s.apiRssMb} | ${s.workerRssMb} | ${s.tablesMb.jobs} + ${s.indexesMb.jobs} | ${s.tablesMb.attempts} + ${s.indexesMb.attempts} | ${s.tablesMb.job_events} + ${s.indexesMb.job_events} | ${s.deadTuples.jobs} / ${s.deadTuples.attempts} / ${s.deadTuples.job_events} | ${s.autovacuums} (${s.autoanalyzes}) | ${s.creates} | ${s.createP99Ms} | ${s.live} | ${s.kept} |`,
    ),
    '',
    `RSS against its value at minute ${at6(r)}: api ${r.rss.api.reference} MB, at most ${r.rss.api.maxDriftPct} % away over the last two thirds (peak ${r.rss.api.max} MB); ` +
      `worker ${r.rss.worker.reference} MB, at most ${r.rss.worker.maxDriftPct} % away (peak ${r.rss.worker.max} MB). ` +
      `Tables (heap + indexes) at a third of the run → at the end: ${Object.entries(r.bounded)
        .map(([t, b]) => `${t} ${b.third} → ${b.end} MB`)
        .join(', ')}. Creates that failed: ${r.failed}.`,
  ];
  return lines.join('\n');
}

const at6 = (r: SoakResult) => r.samples[Math.max(0, Math.round(r.samples.length / 6) - 1)]?.minute ?? 0;
