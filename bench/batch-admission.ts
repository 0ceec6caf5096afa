/**
 * The `batch-admission` case (docs/benchmarks.md#batch-admission), on request: another owner's single creates
 * while many owners post 10,000-item batches back to back, each sender honouring a 503's Retry-After. Three phases
 * on one ROLE=api process (DB_POOL_SIZE as the service's default unless passed through): no batches (the
 * baseline); batches unbounded (MAX_CONCURRENT_BATCHES and its per-owner bound at 1000); batches under the
 * default bounds. Per phase: the single creates' latency and refusals, and the batches committed and refused.
 */
import type { ChildProcess } from 'node:child_process';

const ITEMS = 10_000;
/** Owners posting batches, two senders each: more writes at once than the default pool has connections. */
const BATCH_OWNERS = 12;
const SENDERS_PER_OWNER = 2;
/** The other owner's single creates, closed loops. */
const SINGLE_SENDERS = 4;

export interface BatchAdmissionRow {
  phase: string;
  /** MAX_CONCURRENT_BATCHES / MAX_CONCURRENT_BATCHES_PER_OWNER, or null for the phase without batches. */
  bounds: string | null;
  seconds: number;
  singles: number;
  singleNon2xx: number;
  p50: number;
  p99: number;
  maxMs: number;
  batchesCommitted: number;
  batchesRefused: number;
  /** Jobs committed by batches per second. */
  batchJobsPerSecond: number;
}

const percentile = (sorted: number[], p: number) =>
  sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] : 0;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function batchAdmissionCase(options: {
  run: string;
  seconds: number;
  createKey: (owner: string) => string;
  startService: (
    extraEnv: Record<string, string>,
  ) => Promise<{ child: ChildProcess; url: string; stop: () => Promise<void> }>;
}): Promise<BatchAdmissionRow[]> {
  const { run, seconds } = options;
  const json = { 'content-type': 'application/json' };
  const singleHeaders = { ...json, authorization: `Bearer ${options.createKey(`bench-admission-single-${run}`)}` };
  const batchHeaders = Array.from({ length: BATCH_OWNERS }, (_, o) => ({
    ...json,
    authorization: `Bearer ${options.createKey(`bench-admission-${run}-${o}`)}`,
  }));
  const phases: Array<{ phase: string; env: Record<string, string> | null }> = [
    { phase: 'no batches', env: null },
    { phase: 'batches, unbounded', env: { MAX_CONCURRENT_BATCHES: '1000', MAX_CONCURRENT_BATCHES_PER_OWNER: '1000' } },
    { phase: 'batches, default bounds', env: {} },
  ];
  const rows: BatchAdmissionRow[] = [];
  for (const [p, { phase, env }] of phases.entries()) {
    const service = await options.startService(env ?? {});
    try {
      const until = performance.now() + seconds * 1000;
      const latencies: number[] = [];
      let singleNon2xx = 0;
      let committed = 0;
      let refused = 0;
      const singles = Array.from({ length: SINGLE_SENDERS }, async (_, s) => {
        for (let i = 0; performance.now() < until; i++) {
          const t0 = performance.now();
          const res = await fetch(`${service.url}/v1/jobs`, {
            method: 'POST',
            headers: { ...singleHeaders, 'idempotency-key': `single-${run}-${p}-${s}-${i}` },
            body: JSON.stringify({
              operation: 'summarize',
              input: { text: 'another owner' },
              providers: ['bench-zero'],
            }),
          });
          await res.arrayBuffer();
          latencies.push(performance.now() - t0);
          if (res.status >= 300) singleNon2xx++;
        }
      });
      const batches = env
        ? Array.from({ length: BATCH_OWNERS * SENDERS_PER_OWNER }, async (_, s) => {
            const owner = s % BATCH_OWNERS;
            for (let i = 0; performance.now() < until; i++) {
              const prefix = `b-${run}-${p}-${s}-${i}`;
              const items = Array.from({ length: ITEMS }, (_, k) => ({
                key: `${prefix}-${k}`,
                operation: 'summarize',
                input: { text: `document ${k} of an admission batch` },
                providers: ['bench-zero'],
              }));
              const res = await fetch(`${service.url}/v1/batches`, {
                method: 'POST',
                headers: { ...batchHeaders[owner], 'idempotency-key': prefix },
                body: JSON.stringify({ items }),
              });
              await res.arrayBuffer();
              if (res.status === 201) committed++;
              else if (res.status === 503) {
                refused++;
                // As a client does: back off for the Retry-After the service sent.
                await sleep(Number(res.headers.get('retry-after') ?? '1') * 1000);
              } else throw new Error(`a batch answered ${res.status}`);
            }
          })
        : [];
      const started = performance.now();
      await Promise.all([...singles, ...batches]);
      const elapsed = (performance.now() - started) / 1000;
      latencies.sort((a, b) => a - b);
      rows.push({
        phase,
        bounds: env ? `${env.MAX_CONCURRENT_BATCHES ?? '4'} / ${env.MAX_CONCURRENT_BATCHES_PER_OWNER ?? '2'}` : null,
        seconds: Math.round(elapsed * 10) / 10,
        singles: latencies.length,
        singleNon2xx,
        p50: percentile(latencies, 50),
        p99: percentile(latencies, 99),
        maxMs: latencies[latencies.length - 1] ?? 0,
        batchesCommitted: committed,
        batchesRefused: refused,
        batchJobsPerSecond: Math.round((committed * ITEMS) / elapsed),
      });
    } finally {
      await service.stop();
    }
  }
  return rows;
}

export function batchAdmissionTable(rows: BatchAdmissionRow[]): string {
  const ms = (n: number) => n.toFixed(1);
  return [
    '| phase | bounds (process / owner) | s | single creates | non-2xx | p50 ms | p99 ms | max ms | batches 201 | batches 503 | batch jobs/s |',
    '|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
    ...rows.map(
      (r) =>
        `| ${r.phase} | ${r.bounds ?? '—'} | ${r.seconds} | ${r.singles} | ${r.singleNon2xx} | ${ms(r.p50)} | ` +
        `${ms(r.p99)} | ${ms(r.maxMs)} | ${r.batchesCommitted} | ${r.batchesRefused} | ${r.batchJobsPerSecond} |`,
    ),
  ].join('\n');
}
