/**
 * `drain` (issue 34): zero-latency throughput against the queue libraries, in one run on one PostgreSQL server.
 * Each system drains 100,000 jobs already due, on a database of its own, as one process of its own:
 *
 * - onejob: one ROLE=worker process, default concurrency, bench-zero (answers at once); the jobs of 1 owner, then
 *   of 20,000 owners (5 each) (owners.ts, drainOnejob: the drain-owners case's own drain);
 * - pg-boss and graphile-worker 0.18 (bench/peer-drain.ts), no-op handlers: pg-boss with `batchSize: 500` on
 *   4 workers, and the same calling `notifyWorker` after a full batch (without it each worker waits out its
 *   polling interval, 0.5 s at least, between batches: 4 × 500 / 0.5 s = 4,000 jobs/s is then its ceiling);
 *   graphile-worker with its defaults, and batched (`localQueue.size: 500`, `completeJobBatchDelay: 0`).
 *
 * For each: jobs/s (from the moment work started, or the jobs became due, to the last completion), the server's
 * CPU per job and the process's, and from the server's counters the transactions, statements and rows written
 * per job (server-counters.ts).
 */
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';

import { dropDatabase, emptyDatabase } from './databases.js';
import { sleep } from './load.js';
import { DRAIN_JOBS, DRAIN_SHAPES, drainOnejob, type OwnersContext, settledOf } from './owners.js';
import { type DrainCost, DrainMeter } from './server-counters.js';

export type DrainPeer = 'pgboss' | 'pgboss-notify' | 'graphile' | 'graphile-batched';

export interface DrainRow {
  system: 'onejob' | DrainPeer;
  setup: string;
  jobs: number;
  settled: number;
  seconds: number;
  jobsPerSecond: number;
  cost: DrainCost;
}

const PEERS: Array<{ peer: DrainPeer; setup: string }> = [
  { peer: 'pgboss', setup: 'pg-boss 10: work() batchSize 500 × 4 workers, polling 0.5 s' },
  { peer: 'pgboss-notify', setup: 'pg-boss 10: the same, notifyWorker after a full batch' },
  { peer: 'graphile', setup: 'graphile-worker 0.18: defaults (concurrency 1)' },
  { peer: 'graphile-batched', setup: 'graphile-worker 0.18: localQueue.size 500, completeJobBatchDelay 0' },
];

interface PeerResult {
  jobs: number;
  seconds: number;
  jobsPerSecond: number;
  cpuSeconds: number;
  observerQueries: number;
}

async function drainPeer(ctx: OwnersContext, peer: DrainPeer, setup: string): Promise<DrainRow> {
  const databaseUrl = await emptyDatabase(ctx, 'drain', peer);
  try {
    const child = spawn(
      process.execPath,
      ['dist/bench/peer-drain.js', '--peer', peer, '--url', databaseUrl, '--jobs', String(DRAIN_JOBS)],
      { stdio: ['pipe', 'pipe', 'inherit'] },
    );
    const exited = new Promise<number>((resolve) => child.once('exit', (code) => resolve(code ?? 1)));
    let meter: DrainMeter | undefined;
    let result: PeerResult | undefined;
    for await (const line of createInterface({ input: child.stdout! })) {
      const message = JSON.parse(line) as { seeded?: true } & Partial<PeerResult>;
      if (message.seeded) {
        // A second and a half of quiet: the seeding's counts are published (server-counters.ts).
        await sleep(1500);
        meter = await DrainMeter.start(ctx, databaseUrl);
        child.stdin!.end('go\n');
      } else {
        meter?.stopCpu();
        result = message as PeerResult;
      }
    }
    if ((await exited) !== 0 || !meter || !result) throw new Error(`drain: the ${peer} peer failed`);
    await sleep(1500);
    const observer = { statements: result.observerQueries, transactions: result.observerQueries, rowsWritten: 0 };
    const cost = await meter.cost(result.jobs, observer, result.cpuSeconds);
    ctx.log(`drain: ${peer}: ${result.jobsPerSecond} jobs/s (${result.seconds.toFixed(1)} s)`);
    const { jobs, seconds, jobsPerSecond } = result;
    return { system: peer, setup, jobs, settled: jobs, seconds, jobsPerSecond, cost };
  } finally {
    await dropDatabase(ctx, databaseUrl);
  }
}

export async function drainCase(ctx: OwnersContext): Promise<DrainRow[]> {
  const rows: DrainRow[] = [];
  for (const owners of DRAIN_SHAPES) {
    const row = await drainOnejob(ctx, owners, 'drain');
    rows.push({
      system: 'onejob',
      setup: `onejob: 1 ROLE=worker, default concurrency, ${owners.toLocaleString('en')} owner${owners > 1 ? 's' : ''}`,
      jobs: row.jobs,
      settled: row.settled,
      seconds: row.seconds,
      jobsPerSecond: row.jobsPerSecond,
      cost: row.cost,
    });
  }
  for (const { peer, setup } of PEERS) rows.push(await drainPeer(ctx, peer, setup));
  return rows;
}

export function drainTable(rows: DrainRow[]): string {
  const boss = rows.find((r) => r.system === 'pgboss');
  const batched = rows.find((r) => r.system === 'graphile-batched');
  const ratio = (r: DrainRow, of: DrainRow | undefined) =>
    of ? `${(r.jobsPerSecond / of.jobsPerSecond).toFixed(2)}×` : '';
  const n = (v: number | null) => (v === null ? 'n/a' : String(v));
  return [
    '| set-up | jobs | seconds | jobs/s | PostgreSQL CPU ms/job | process CPU ms/job | transactions/job | statements/job | rows written/job | jobs/s ÷ pg-boss | ÷ graphile batched |',
    '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
    ...rows.map(
      (r) =>
        `| ${r.setup} | ${settledOf(r)} | ${r.seconds.toFixed(1)} | ${r.jobsPerSecond} | ${n(r.cost.cpuMsPerJob.postgres)} | ${r.cost.cpuMsPerJob.process} | ${r.cost.transactionsPerJob} | ${n(r.cost.statementsPerJob)} | ${r.cost.rowsWrittenPerJob} | ${ratio(r, boss)} | ${ratio(r, batched)} |`,
    ),
  ].join('\n');
}

/** Each system's statements that took the most of the server's time over its drain (pg_stat_statements). */
export function drainStatements(rows: DrainRow[]): string {
  return rows
    .filter((r) => r.cost.top?.length)
    .map((r) =>
      [
        `${r.setup}:`,
        ...r.cost.top!.map(
          (t) =>
            `  ${String(Math.round(t.share * 100)).padStart(3)} %  ${t.callsPerJob.toFixed(3)}/job  ${t.meanMs.toFixed(3)} ms  ${t.query}`,
        ),
      ].join('\n'),
    )
    .join('\n');
}
