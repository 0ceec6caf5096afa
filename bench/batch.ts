/**
 * The `batch` case (docs/benchmarks.md#batches): a 10,000-item POST /v1/batches accepted (201, all committed)
 * against, in the same run on the same PostgreSQL: the same 10,000 jobs as single creates over 64 connections;
 * pg-boss 10's `insert()` of 10,000 jobs with a singletonKey each (the peer); and the batch's own statements
 * sent directly through `pg` (BatchesRepository on a bare pool: the floor of any implementation). Then the replay
 * of the same batch, and the service's resident memory around the batch.
 */
import type { ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';

import pg from 'pg';
import PgBoss from 'pg-boss';

import type { Queryable } from '../src/database/transactions.js';
import { BatchesRepository, type NewBatchJob } from '../src/ledger/batches.repository.js';
import { createJobs } from './load.js';

export const BATCH_ITEMS = 10_000;

export interface BatchRow {
  items: number;
  /** Each figure is the best of `runs`, in ms; rates are jobs per second. */
  runs: number;
  batchMs: number;
  replayMs: number;
  singlesMs: number;
  pgBossMs: number;
  postgresMs: number;
  rssBeforeMb: number;
  rssPeakDuringMb: number;
  rssGrowthMb: number;
}

const rssMb = (child: ChildProcess, field: 'VmRSS' | 'VmHWM') =>
  Number(new RegExp(`${field}:\\s+(\\d+)`).exec(readFileSync(`/proc/${child.pid}/status`, 'utf8'))![1]) / 1024;

const itemsOf = (prefix: string) =>
  Array.from({ length: BATCH_ITEMS }, (_, i) => ({
    key: `${prefix}-${i}`,
    operation: 'summarize',
    input: { text: `document ${i} of the batch bench` },
    providers: ['bench-zero'],
  }));

async function timed(work: () => Promise<void>): Promise<number> {
  const t0 = performance.now();
  await work();
  return performance.now() - t0;
}

async function postBatch(url: string, headers: Record<string, string>, key: string, body: string): Promise<number> {
  const init = { method: 'POST', headers: { ...headers, 'idempotency-key': key }, body };
  const res = await fetch(`${url}/v1/batches`, init);
  await res.arrayBuffer();
  return res.status;
}

export async function batchCase(options: {
  pool: pg.Pool;
  databaseUrl: string;
  run: string;
  headers: Record<string, string>;
  service: { child: ChildProcess; url: string };
  runs?: number;
}): Promise<BatchRow> {
  const { pool, run, headers, service } = options;
  const runs = options.runs ?? 3;
  const best = { batchMs: Infinity, replayMs: Infinity, singlesMs: Infinity, pgBossMs: Infinity, postgresMs: Infinity };
  const rssBeforeMb = rssMb(service.child, 'VmRSS');
  let rssPeakDuringMb = rssBeforeMb;
  const sampler = setInterval(() => (rssPeakDuringMb = Math.max(rssPeakDuringMb, rssMb(service.child, 'VmRSS'))), 20);

  const boss = new PgBoss({ connectionString: options.databaseUrl, max: 8, supervise: false, schedule: false });
  boss.on('error', () => undefined);
  await boss.start();
  await boss.createQueue('bench-batch');
  const repository = new BatchesRepository(pool as never);
  try {
    for (let r = 0; r < runs; r++) {
      const body = JSON.stringify({ items: itemsOf(`b-${run}-${r}`) });
      const send = (expected: number) => async () => {
        const status = await postBatch(service.url, headers, `batch-${run}-${r}`, body);
        if (status !== expected) throw new Error(`the batch answered ${status}, not ${expected}`);
      };
      best.batchMs = Math.min(best.batchMs, await timed(send(201)));
      best.replayMs = Math.min(best.replayMs, await timed(send(200)));

      best.singlesMs = Math.min(
        best.singlesMs,
        await timed(() =>
          createJobs(service.url, headers, {
            prefix: `single-${run}-${r}`,
            count: BATCH_ITEMS,
            senders: 64,
            provider: 'bench-zero',
            text: 'single',
          }),
        ),
      );

      const bossJobs = Array.from({ length: BATCH_ITEMS }, (_, i) => ({
        name: 'bench-batch',
        data: { text: `document ${i} of the batch bench` },
        singletonKey: `boss-${run}-${r}-${i}`,
      }));
      best.pgBossMs = Math.min(best.pgBossMs, await timed(() => boss.insert(bossJobs)));

      // The batch's own statements through pg: the records built before the clock starts.
      const jobs: NewBatchJob[] = itemsOf(`pg-${run}-${r}`).map((item, ord) => ({
        ord,
        idempotencyKey: item.key,
        fingerprint: 'f'.repeat(64),
        operation: item.operation,
        inputJson: JSON.stringify(item.input),
        providers: item.providers,
        waitingFor: null,
      }));
      best.postgresMs = Math.min(
        best.postgresMs,
        await timed(async () => {
          const client = await pool.connect();
          const query = async (sql: string, params?: unknown[]) => (await client.query(sql, params)).rows;
          const m = { query } as Queryable;
          try {
            await client.query('BEGIN');
            const batch = (await repository.insertBatch(
              {
                ownerId: 'bench-pg',
                idempotencyKey: `pg-${run}-${r}`,
                fingerprint: 'f'.repeat(64),
                metadata: null,
                priority: 0,
                itemCount: jobs.length,
              },
              m,
            ))!;
            const options = { currency: null, traceContext: null };
            const created = await repository.insertJobs('bench-pg', batch, jobs, options, m);
            await repository.finish(batch.id, [], created.size, m);
            await client.query('COMMIT');
          } finally {
            client.release();
          }
        }),
      );
    }
  } finally {
    clearInterval(sampler);
    await boss.stop({ graceful: false, wait: true, timeout: 5_000 });
  }
  return {
    items: BATCH_ITEMS,
    runs,
    ...best,
    rssBeforeMb: Math.round(rssBeforeMb),
    rssPeakDuringMb: Math.round(rssPeakDuringMb),
    rssGrowthMb: Math.round(rssPeakDuringMb - rssBeforeMb),
  };
}

export function batchTable(row: BatchRow): string {
  const rate = (ms: number) => Math.round((row.items / ms) * 1000);
  const line = (what: string, ms: number, vs: string) => `| ${what} | ${Math.round(ms)} | ${rate(ms)} | ${vs} |`;
  const ratio = (ms: number) => `${(ms / row.batchMs).toFixed(2)}×`;
  return [
    `| ${row.items.toLocaleString('en')} jobs (best of ${row.runs}) | ms | jobs/s | batch is faster by |`,
    '|---|---:|---:|---:|',
    line('POST /v1/batches (201, committed)', row.batchMs, '1.00×'),
    line('replay of the same batch (200)', row.replayMs, ratio(row.replayMs)),
    line('single creates, 64 connections', row.singlesMs, ratio(row.singlesMs)),
    line('pg-boss 10 `insert()`, singletonKey each', row.pgBossMs, ratio(row.pgBossMs)),
    line("the batch's statements through `pg`", row.postgresMs, ratio(row.postgresMs)),
    '',
    `service RSS: ${row.rssBeforeMb} MB before, ${row.rssPeakDuringMb} MB at most during the case ` +
      `(growth ${row.rssGrowthMb} MB)`,
  ].join('\n');
}
