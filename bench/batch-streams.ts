/**
 * `batch-streams` (docs/benchmarks.md#batch-streams-one-owners-batch-streams-and-the-database-issue-33-item-7), on
 * request: what one owner's live streams of a big batch cost everyone else. A 10,000-item batch is created with the
 * worker off; N streams open on `GET /v1/batches/{id}/events` (0, then MAX_STREAMS_PER_OWNER's default of 100);
 * then a worker process settles the batch while another owner's closed loops post single creates. Per phase: how
 * long the batch took, PostgreSQL's CPU and the rows it read (pg_stat_database: tup_returned + tup_fetched) per
 * settled member, the API process's CPU, the messages each stream got, and the other owner's create latency. The
 * streams' own cost is the difference between the phases of one run.
 */
import type { ChildProcess } from 'node:child_process';

import pg from 'pg';

import { percentiles, sleep } from './load.js';
import { hold } from './sse.js';

const ITEMS = 10_000;
const OTHER_SENDERS = 4;

interface Service {
  child: ChildProcess;
  url: string;
  stop: () => Promise<void>;
}

export interface BatchStreamsRow {
  streams: number;
  settleSeconds: number;
  membersPerSecond: number;
  /** PostgreSQL's CPU seconds per 1,000 settled members (embedded server only). */
  postgresCpuPer1000: number | null;
  /** The API process's CPU seconds per 1,000 settled members: it serves the streams. */
  apiCpuPer1000: number;
  /** Rows PostgreSQL read (pg_stat_database tup_returned + tup_fetched) per settled member. */
  rowsReadPerMember: number;
  messagesPerStream: { p50: number; max: number };
  otherCreates: number;
  otherCreateMs: { p50: number; p99: number };
}

export interface BatchStreamsContext {
  pool: pg.Pool;
  run: string;
  headers: Record<string, string>;
  createKey: (owner: string) => string;
  startService: (role: 'api' | 'worker', extraEnv: Record<string, string>) => Promise<Service>;
  processCpuSeconds: (pid: number) => number;
  /** PostgreSQL's CPU seconds so far, or undefined when the server is not the bench's own. */
  postgresCpuSeconds: () => number | undefined;
}

async function rowsRead(pool: pg.Pool): Promise<number> {
  await pool.query('SELECT pg_stat_clear_snapshot()');
  const sql = `SELECT (tup_returned + tup_fetched)::float8 AS n FROM pg_stat_database WHERE datname = current_database()`;
  return (await pool.query<{ n: number }>(sql)).rows[0].n;
}

export async function batchStreamsCase(ctx: BatchStreamsContext, phases = [0, 100]): Promise<BatchStreamsRow[]> {
  const otherHeaders = {
    'content-type': 'application/json',
    authorization: `Bearer ${ctx.createKey(`bench-batch-streams-other-${ctx.run}`)}`,
  };
  const rows: BatchStreamsRow[] = [];
  const api = await ctx.startService('api', {});
  try {
    for (const streams of phases) {
      const items = Array.from({ length: ITEMS }, (_, k) => ({
        key: `bs-${ctx.run}-${streams}-${k}`,
        operation: 'summarize',
        input: { text: `document ${k} of a streamed batch` },
        providers: ['bench-zero'],
      }));
      const created = await fetch(`${api.url}/v1/batches`, {
        method: 'POST',
        headers: { ...ctx.headers, 'idempotency-key': `bs-${ctx.run}-${streams}` },
        body: JSON.stringify({ items }),
      });
      if (created.status !== 201) throw new Error(`the batch answered ${created.status}`);
      const batchId = ((await created.json()) as { id: string }).id;
      const counts = Array.from({ length: streams }, () => 0);
      const held = await Promise.all(
        counts.map((_, i) => hold(`${api.url}/v1/batches/${batchId}/events`, ctx.headers, () => counts[i]++)),
      );
      await sleep(2_000); // the openings' reads, out of the measured window
      const pg0 = ctx.postgresCpuSeconds();
      const api0 = ctx.processCpuSeconds(api.child.pid!);
      const read0 = await rowsRead(ctx.pool);
      const started = performance.now();
      const worker = await ctx.startService('worker', { WORKER_POLL_MS: '50' });
      let done = false;
      const latencies: number[] = [];
      const others = Array.from({ length: OTHER_SENDERS }, async (_, s) => {
        for (let i = 0; !done; i++) {
          const t0 = performance.now();
          const res = await fetch(`${api.url}/v1/jobs`, {
            method: 'POST',
            headers: { ...otherHeaders, 'idempotency-key': `bs-other-${ctx.run}-${streams}-${s}-${i}` },
            body: JSON.stringify({
              operation: 'summarize',
              input: { text: 'another owner' },
              providers: ['bench-zero'],
            }),
          });
          await res.arrayBuffer();
          if (res.status !== 201) throw new Error(`another owner's create answered ${res.status}`);
          latencies.push(performance.now() - t0);
        }
      });
      try {
        for (;;) {
          const res = await fetch(`${api.url}/v1/batches/${batchId}`, { headers: ctx.headers });
          const batch = (await res.json()) as { status: string };
          if (batch.status === 'completed') break;
          if (performance.now() - started > 300_000) throw new Error('the batch did not settle within 300 s');
          await sleep(200);
        }
      } finally {
        done = true;
        await Promise.all(others);
      }
      const seconds = (performance.now() - started) / 1000;
      await worker.stop();
      // pg_stat counters are flushed by each backend about once a second: wait for the last ones.
      await sleep(1_500);
      const read1 = await rowsRead(ctx.pool);
      const pg1 = ctx.postgresCpuSeconds();
      const api1 = ctx.processCpuSeconds(api.child.pid!);
      // Streams end by themselves once the batch is done; close what is left.
      await Promise.race([Promise.all(held.map((h) => h.ended)), sleep(5_000)]);
      for (const h of held) h.close();
      const per1000 = (s: number) => Math.round((s / ITEMS) * 1000 * 1000) / 1000;
      const sorted = [...counts].sort((a, b) => a - b);
      rows.push({
        streams,
        settleSeconds: Math.round(seconds * 10) / 10,
        membersPerSecond: Math.round(ITEMS / seconds),
        postgresCpuPer1000: pg0 === undefined || pg1 === undefined ? null : per1000(pg1 - pg0),
        apiCpuPer1000: per1000(api1 - api0),
        rowsReadPerMember: Math.round((read1 - read0) / ITEMS),
        messagesPerStream: { p50: sorted[Math.floor(sorted.length / 2)] ?? 0, max: sorted[sorted.length - 1] ?? 0 },
        otherCreates: latencies.length,
        otherCreateMs: percentiles(latencies),
      });
    }
  } finally {
    await api.stop();
  }
  return rows;
}

export function batchStreamsTable(rows: BatchStreamsRow[]): string {
  return [
    '| streams | settle s | members/s | PostgreSQL CPU s / 1,000 | API CPU s / 1,000 | rows read / member | messages per stream p50 / max | other owner creates | its p50 / p99 ms |',
    '|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
    ...rows.map(
      (r) =>
        `| ${r.streams} | ${r.settleSeconds} | ${r.membersPerSecond} | ${r.postgresCpuPer1000 ?? '—'} | ` +
        `${r.apiCpuPer1000} | ${r.rowsReadPerMember} | ${r.messagesPerStream.p50} / ${r.messagesPerStream.max} | ` +
        `${r.otherCreates} | ${r.otherCreateMs.p50} / ${r.otherCreateMs.p99} |`,
    ),
  ].join('\n');
}
