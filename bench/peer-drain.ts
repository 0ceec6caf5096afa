/**
 * The peers of the `drain` case (bench/drain.ts): a queue library draining `--jobs` no-op jobs already queued on
 * its own database, run as its own process so that its CPU can be measured apart.
 *
 *   --peer pgboss            pg-boss: `work()` with `batchSize: 500` on 4 workers (pollingIntervalSeconds 0.5,
 *                            its least), handlers that return at once.
 *   --peer pgboss-notify     the same, and a handler whose batch was full calls `notifyWorker(id)`, pg-boss's own
 *                            way to skip the polling interval before the next fetch.
 *   --peer graphile          graphile-worker with its defaults (concurrency 1, no local queue, no batching).
 *   --peer graphile-batched  graphile-worker with `localQueue.size: 500` and `completeJobBatchDelay: 0`.
 *
 * It queues the jobs in bulk first (pg-boss `insert`, graphile-worker `addJobs`, 5,000 a call) and prints
 * `{"seeded":true}`; then waits for a line on stdin (the parent reads the server's counters meanwhile), works them,
 * and prints one JSON line: {jobs, seconds, jobsPerSecond, cpuSeconds, observerQueries} (seconds from the start of
 * work to the last completion; cpuSeconds this process's over that time; observerQueries the statements it sent
 * itself to see that the drain was over, which the parent takes off the server's counts).
 */
import { once } from 'node:events';
import { parseArgs } from 'node:util';

import { Logger, makeWorkerUtils, run } from 'graphile-worker';
import pg from 'pg';
import PgBoss from 'pg-boss';

const { values } = parseArgs({
  options: {
    peer: { type: 'string' },
    url: { type: 'string' },
    jobs: { type: 'string', default: '100000' },
  },
});
const JOBS = Number(values.jobs);
const CHUNK = 5_000;
const BATCH = 500;
const WORKERS = 4;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

interface Drained {
  seconds: number;
  cpuSeconds: number;
  observerQueries: number;
  /** Shuts the library down: after the result is printed, so that the parent's CPU reading leaves it out. */
  stop: () => Promise<unknown>;
}

function cpuSeconds(since: NodeJS.CpuUsage): number {
  const used = process.cpuUsage(since);
  return (used.user + used.system) / 1e6;
}

/** Tells the parent the jobs are queued, and waits for its go. */
async function seeded(): Promise<void> {
  process.stdout.write(`${JSON.stringify({ seeded: true })}\n`);
  await once(process.stdin, 'data');
}

async function pgBoss(notify: boolean): Promise<Drained> {
  const boss = new PgBoss({ connectionString: values.url, max: WORKERS + 6, supervise: false, schedule: false });
  boss.on('error', (error: Error) => process.stderr.write(`pg-boss: ${error.message}\n`));
  await boss.start();
  const queue = 'drain';
  await boss.createQueue(queue);
  for (let i = 0; i < JOBS; i += CHUNK) {
    const n = Math.min(CHUNK, JOBS - i);
    await boss.insert(Array.from({ length: n }, (_, k) => ({ name: queue, data: { i: i + k } })));
  }
  const observer = new pg.Client({ connectionString: values.url });
  await observer.connect();
  await seeded();

  const cpu0 = process.cpuUsage();
  const started = Date.now();
  let done = 0;
  let handled!: () => void;
  const allHandled = new Promise<void>((resolve) => (handled = resolve));
  const ids: string[] = [];
  for (let w = 0; w < WORKERS; w++) {
    const slot = w;
    ids.push(
      await boss.work(queue, { batchSize: BATCH, pollingIntervalSeconds: 0.5 }, async (batch: PgBoss.Job[]) => {
        done += batch.length;
        if (done >= JOBS) handled();
        else if (notify && batch.length === BATCH && ids[slot]) boss.notifyWorker(ids[slot]);
      }),
    );
  }
  await allHandled;
  // The handlers are done; pg-boss completes each batch after its handler returned.
  let observerQueries = 0;
  for (;;) {
    observerQueries++;
    const { rows } = await observer.query<{ left: number; last: Date | null }>(
      `SELECT count(*) FILTER (WHERE state <> 'completed')::int AS left, max(completed_on) AS last
         FROM pgboss.job WHERE name = $1`,
      [queue],
    );
    if (rows[0].left === 0) {
      const cpu = cpuSeconds(cpu0);
      await observer.end();
      const stop = () => boss.stop({ graceful: true, wait: true, timeout: 10_000 });
      return { seconds: (rows[0].last!.getTime() - started) / 1000, cpuSeconds: cpu, observerQueries, stop };
    }
    await sleep(5);
  }
}

async function graphileWorker(batched: boolean): Promise<Drained> {
  // Warnings and errors only: its default logs a line per completed job, which is not the work measured here.
  const logger = new Logger(() => (level, message) => {
    if (level === 'error' || level === 'warning') process.stderr.write(`graphile-worker ${level}: ${message}\n`);
  });
  const utils = await makeWorkerUtils({ connectionString: values.url, logger });
  await utils.migrate();
  for (let i = 0; i < JOBS; i += CHUNK) {
    const n = Math.min(CHUNK, JOBS - i);
    await utils.addJobs(Array.from({ length: n }, (_, k) => ({ identifier: 'noop', payload: { i: i + k } })));
  }
  await utils.release();
  const observer = new pg.Client({ connectionString: values.url });
  await observer.connect();
  await seeded();

  const cpu0 = process.cpuUsage();
  const started = Date.now();
  let done = 0;
  let handled!: () => void;
  const allHandled = new Promise<void>((resolve) => (handled = resolve));
  const runner = await run({
    connectionString: values.url,
    logger,
    noHandleSignals: true,
    taskList: {
      noop: async () => {
        if (++done >= JOBS) handled();
      },
    },
    preset: batched ? { worker: { localQueue: { size: BATCH }, completeJobBatchDelay: 0 } } : undefined,
  });
  await allHandled;
  // Completed jobs are deleted; batched completions are written just after the last task returned.
  let observerQueries = 0;
  for (;;) {
    observerQueries++;
    const { rows } = await observer.query<{ left: number }>(
      'SELECT count(*)::int AS left FROM graphile_worker._private_jobs',
    );
    if (rows[0].left === 0) {
      const seconds = (Date.now() - started) / 1000;
      const cpu = cpuSeconds(cpu0);
      await observer.end();
      return { seconds, cpuSeconds: cpu, observerQueries, stop: () => runner.stop() };
    }
    await sleep(5);
  }
}

async function main(): Promise<void> {
  const peer = values.peer;
  const drained =
    peer === 'pgboss' || peer === 'pgboss-notify'
      ? await pgBoss(peer === 'pgboss-notify')
      : peer === 'graphile' || peer === 'graphile-batched'
        ? await graphileWorker(peer === 'graphile-batched')
        : undefined;
  if (!drained) throw new Error(`--peer: pgboss, pgboss-notify, graphile or graphile-batched, not ${peer}`);
  const { stop, ...result } = drained;
  process.stdout.write(
    `${JSON.stringify({ jobs: JOBS, ...result, jobsPerSecond: Math.round(JOBS / result.seconds) })}\n`,
  );
  await stop();
  process.exit(0);
}

main().catch((error: Error) => {
  process.stderr.write(`drain peer failed: ${error.stack}\n`);
  process.exit(1);
});
