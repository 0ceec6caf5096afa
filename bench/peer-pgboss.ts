/**
 * The peer of the `pipeline-1s` case: pg-boss on the same PostgreSQL, run as its own process so its CPU can be
 * measured apart. It sends `--jobs` jobs (a singleton key each, `--senders` at a time, as the service's HTTP
 * creates are), works them with handlers that wait `--latency-ms` per batch, `--workers` × `--batch` in flight
 * (a throughput setup a competent user would pick), and prints one JSON line when every job completed.
 */
import { parseArgs } from 'node:util';

import PgBoss from 'pg-boss';

const { values } = parseArgs({
  options: {
    url: { type: 'string' },
    jobs: { type: 'string', default: '3000' },
    senders: { type: 'string', default: '64' },
    workers: { type: 'string', default: '32' },
    batch: { type: 'string', default: '8' },
    'latency-ms': { type: 'string', default: '1000' },
    rate: { type: 'string', default: '0' },
    queue: { type: 'string', default: 'bench' },
  },
});

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function main(): Promise<void> {
  const jobs = Number(values.jobs);
  const latencyMs = Number(values['latency-ms']);
  const workers = Number(values.workers);
  const boss = new PgBoss({ connectionString: values.url, max: workers + 8, supervise: false, schedule: false });
  boss.on('error', () => undefined);
  await boss.start();
  const queue = values.queue!;
  await boss.createQueue(queue);
  let done = 0;
  let peak = 0;
  let inFlight = 0;
  const finished = new Promise<void>((resolve) => {
    const handler = async (batch: PgBoss.Job[]) => {
      inFlight += batch.length;
      peak = Math.max(peak, inFlight);
      await sleep(latencyMs);
      inFlight -= batch.length;
      done += batch.length;
      if (done >= jobs) setTimeout(resolve, 100);
    };
    for (let i = 0; i < workers; i++) {
      void boss.work(queue, { batchSize: Number(values.batch), pollingIntervalSeconds: 0.5 }, handler);
    }
  });
  const started = Date.now();
  const rate = Number(values.rate);
  let next = 0;
  await Promise.all(
    Array.from({ length: Number(values.senders) }, async () => {
      for (;;) {
        const i = next++;
        if (i >= jobs) return;
        if (rate > 0) await sleep(Math.max(0, started + (i * 1000) / rate - Date.now()));
        await boss.send(queue, { i }, { singletonKey: `k-${queue}-${i}` });
      }
    }),
  );
  await finished;
  // Let pg-boss record the last completions.
  await sleep(1000);
  await boss.stop({ graceful: true, wait: true, timeout: 10_000 });
  const cpu = process.cpuUsage();
  process.stdout.write(
    `${JSON.stringify({ peakInFlight: peak, jobs: done, cpuSeconds: (cpu.user + cpu.system) / 1e6 })}\n`,
  );
}

main().catch((error: Error) => {
  process.stderr.write(`pg-boss peer failed: ${error.stack}\n`);
  process.exit(1);
});
