/**
 * `pipeline-1s`: the pipeline at real provider latency (a simulated provider that answers in 1 s), side by side
 * with pg-boss on the same PostgreSQL. Three phases each: a backlog (settled per second against the ideal of
 * in-flight cap / latency), free slots (a trickle below capacity: how fast a job starts and settles), and for
 * onejob a window of 2,000 calls (what the process holds).
 */
import { type ChildProcess, spawn } from 'node:child_process';

import pg from 'pg';

import { postgresCpuSeconds, processCpuSeconds } from './cpu.js';
import { createJobs, percentiles, sleep } from './load.js';

export interface OneSecondRow {
  system: 'onejob' | 'pg-boss';
  phase: 'backlog' | 'free slots' | '2000 in flight';
  inFlightCap: number;
  jobs: number;
  settledPerSecond: number;
  /**
   * Jobs started per second once the last job was created (those not started by then ÷ the time to start them):
   * the workers alone on a backlog, without the creates competing for the machine. Null when too few were left.
   */
  startedPerSecondAfterCreates: number | null;
  ideal: number;
  createdToStartedMs: { p50: number; p99: number };
  createdToSettledMs: { p50: number; p99: number };
  peakInFlight: number;
  cpuMsPerJob: { process: number; postgres: number | null };
  peakRssMb: number | null;
}

interface Service {
  child: ChildProcess;
  url: string;
  stop: () => Promise<void>;
}

export interface OneSecondContext {
  pool: pg.Pool;
  databaseUrl: string;
  run: string;
  headers: Record<string, string>;
  postmaster: number | undefined;
  startService: (extraEnv: Record<string, string>) => Promise<Service>;
  peakRssMb: (child: ChildProcess) => number;
}

const LATENCY_MS = 1000;
const DEFAULT_WINDOW = 256;

/** Polls `count()` until it reaches `target`, sampling `inFlight()` for the peak. */
async function until(
  target: number,
  count: () => Promise<number>,
  inFlight: () => Promise<number>,
  timeoutMs: number,
): Promise<number> {
  let peak = 0;
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    peak = Math.max(peak, await inFlight());
    if ((await count()) >= target) return peak;
    await sleep(200);
  }
  throw new Error(`only ${await count()} of ${target} settled in time`);
}

async function onejobPhase(
  ctx: OneSecondContext,
  service: Service,
  phase: OneSecondRow['phase'],
  window: number,
  jobs: number,
  rate: number,
): Promise<OneSecondRow> {
  const prefix = `p1s-${ctx.run}-${phase.replace(/\W/g, '')}`;
  const cpu0 = processCpuSeconds(service.child.pid!);
  const pg0 = ctx.postmaster ? postgresCpuSeconds(ctx.postmaster) : 0;
  const sampler = until(
    jobs,
    async () =>
      (
        await ctx.pool.query(
          `SELECT count(*)::int AS n FROM jobs WHERE idempotency_key LIKE $1 AND status = 'succeeded'`,
          [`${prefix}-%`],
        )
      ).rows[0].n,
    async () =>
      (
        await ctx.pool.query(
          `SELECT count(*)::int AS n FROM attempts WHERE status = 'running' AND provider = 'bench-1s'`,
        )
      ).rows[0].n,
    jobs * 50 + 120_000,
  );
  await createJobs(service.url, ctx.headers, {
    prefix,
    count: jobs,
    senders: rate > 0 ? 16 : 64,
    provider: 'bench-1s',
    text: 'one second',
    rate,
  });
  const peakInFlight = await sampler;
  const cpu = processCpuSeconds(service.child.pid!) - cpu0;
  const pgCpu = ctx.postmaster ? postgresCpuSeconds(ctx.postmaster) - pg0 : null;
  const rows: Array<{ created: Date; started: Date; completed: Date }> = (
    await ctx.pool.query(
      `SELECT j.created_at AS created, a.started_at AS started, j.completed_at AS completed
         FROM jobs j JOIN attempts a ON a.job_id = j.id AND a.number = 1 WHERE j.idempotency_key LIKE $1`,
      [`${prefix}-%`],
    )
  ).rows;
  return summarize('onejob', phase, window, rows, peakInFlight, cpu, pgCpu, ctx.peakRssMb(service.child));
}

function summarize(
  system: OneSecondRow['system'],
  phase: OneSecondRow['phase'],
  window: number,
  rows: Array<{ created: Date; started: Date; completed: Date }>,
  peakInFlight: number,
  cpu: number,
  pgCpu: number | null,
  rss: number | null,
): OneSecondRow {
  const first = Math.min(...rows.map((r) => r.created.getTime()));
  const last = Math.max(...rows.map((r) => r.completed.getTime()));
  const lastCreated = Math.max(...rows.map((r) => r.created.getTime()));
  const startedAfter = rows.map((r) => r.started.getTime()).filter((t) => t > lastCreated);
  const lastStarted = Math.max(lastCreated, ...startedAfter);
  return {
    system,
    phase,
    inFlightCap: window,
    jobs: rows.length,
    settledPerSecond: Math.round((rows.length / ((last - first) / 1000)) * 10) / 10,
    startedPerSecondAfterCreates:
      startedAfter.length >= 100
        ? Math.round((startedAfter.length / ((lastStarted - lastCreated) / 1000)) * 10) / 10
        : null,
    ideal: window / (LATENCY_MS / 1000),
    createdToStartedMs: percentiles(rows.map((r) => r.started.getTime() - r.created.getTime())),
    createdToSettledMs: percentiles(rows.map((r) => r.completed.getTime() - r.created.getTime())),
    peakInFlight,
    cpuMsPerJob: {
      process: Math.round((cpu * 1000 * 100) / rows.length) / 100,
      postgres: pgCpu === null ? null : Math.round((pgCpu * 1000 * 100) / rows.length) / 100,
    },
    peakRssMb: rss === null ? null : Math.round(rss),
  };
}

async function pgBossPhase(
  ctx: OneSecondContext,
  phase: OneSecondRow['phase'],
  jobs: number,
  rate: number,
): Promise<OneSecondRow> {
  const queue = `bench_${ctx.run}_${phase.replace(/\W/g, '')}`;
  const workers = DEFAULT_WINDOW / 8;
  const pg0 = ctx.postmaster ? postgresCpuSeconds(ctx.postmaster) : 0;
  const child = spawn(
    process.execPath,
    [
      'dist/bench/peer-pgboss.js',
      '--url',
      ctx.databaseUrl,
      '--jobs',
      String(jobs),
      '--workers',
      String(workers),
      '--batch',
      '8',
      '--queue',
      queue,
      '--rate',
      String(rate),
      '--senders',
      rate > 0 ? '16' : '64',
    ],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  let out = '';
  child.stdout!.on('data', (chunk: Buffer) => (out += chunk.toString()));
  const exit = await new Promise<number>((resolve) => child.once('exit', (code) => resolve(code ?? 1)));
  if (exit !== 0) throw new Error('the pg-boss peer failed');
  const peer = JSON.parse(out.trim().split('\n').pop()!) as { peakInFlight: number; cpuSeconds: number };
  const pgCpu = ctx.postmaster ? postgresCpuSeconds(ctx.postmaster) - pg0 : null;
  const rows: Array<{ created: Date; started: Date; completed: Date }> = (
    await ctx.pool.query(
      `SELECT created_on AS created, started_on AS started, completed_on AS completed FROM pgboss.job WHERE name = $1 AND state = 'completed'`,
      [queue],
    )
  ).rows;
  return summarize('pg-boss', phase, DEFAULT_WINDOW, rows, peer.peakInFlight, peer.cpuSeconds, pgCpu, null);
}

export async function pipelineOneSecond(ctx: OneSecondContext): Promise<OneSecondRow[]> {
  const rows: OneSecondRow[] = [];
  // Jobs the earlier cases left due (their creates, the ceilings' inserts) would be claimed first and counted nowhere.
  await ctx.pool.query('UPDATE jobs SET next_attempt_at = NULL WHERE next_attempt_at IS NOT NULL');
  let service = await ctx.startService({});
  try {
    rows.push(await onejobPhase(ctx, service, 'backlog', DEFAULT_WINDOW, 3000, 0));
    rows.push(await onejobPhase(ctx, service, 'free slots', DEFAULT_WINDOW, 300, 100));
  } finally {
    await service.stop();
  }
  service = await ctx.startService({ WORKER_CONCURRENCY: '2000', DB_POOL_SIZE: '40' });
  try {
    rows.push(await onejobPhase(ctx, service, '2000 in flight', 2000, 6000, 0));
  } finally {
    await service.stop();
  }
  rows.push(await pgBossPhase(ctx, 'backlog', 3000, 0));
  rows.push(await pgBossPhase(ctx, 'free slots', 300, 100));
  return rows;
}

export function oneSecondTable(rows: OneSecondRow[]): string {
  return [
    '| system | phase | in-flight cap | jobs | settled/s | started/s after the last create | ideal | % of ideal | created→started p50/p99 ms | created→settled p50/p99 ms | peak in flight | CPU ms/job process + PostgreSQL | peak RSS MB |',
    '|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
    ...rows.map(
      (r) =>
        `| ${r.system} | ${r.phase} | ${r.inFlightCap} | ${r.jobs} | ${r.settledPerSecond} | ${r.startedPerSecondAfterCreates ?? ''} | ${r.ideal} | ${Math.round((r.settledPerSecond / r.ideal) * 100)}% | ${r.createdToStartedMs.p50} / ${r.createdToStartedMs.p99} | ${r.createdToSettledMs.p50} / ${r.createdToSettledMs.p99} | ${r.peakInFlight} | ${r.cpuMsPerJob.process} + ${r.cpuMsPerJob.postgres ?? 'n/a'} | ${r.peakRssMb ?? ''} |`,
    ),
  ].join('\n');
}
