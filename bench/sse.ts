/**
 * `sse`: live streams of job timelines (docs/design.md#live-streams; docs/benchmarks.md).
 *
 * 1. Commit to subscriber: an API process (ROLE=api) serves the streams, a worker process (ROLE=worker) commits
 *    the events (claim, running mark, settlement on bench-1s); every message's arrival is compared with its event's
 *    `at` (the start of the transaction that wrote it: an upper bound of the time since its commit; same host, one
 *    clock).
 * 2. 1,000 idle streams held by one API process (no worker: the jobs stay pending): its RSS, and the database's
 *    commits per second (pg_stat_database.xact_commit) while idle, with no stream and with the 1,000.
 */
import type { ChildProcess } from 'node:child_process';
import { get, type IncomingMessage } from 'node:http';

import pg from 'pg';

import { percentiles, sleep } from './load.js';

interface Service {
  child: ChildProcess;
  url: string;
  stop: () => Promise<void>;
}

export interface SseContext {
  pool: pg.Pool;
  databaseUrl: string;
  run: string;
  headers: Record<string, string>;
  startService: (role: 'api' | 'worker', extraEnv: Record<string, string>) => Promise<Service>;
  rssMb: (child: ChildProcess) => number;
}

export interface SseRow {
  jobs: number;
  messages: number;
  commitToSubscriberMs: { p50: number; p99: number };
  /** One job at a time (no claim or settlement batch around it): the path itself, commit to NOTIFY to read. */
  oneAtATimeMs: { p50: number; p99: number; n: number };
  /** The same per event reason (claimed, provider_called, result_won...): which commit path is slow, if one is. */
  byReason: Record<string, { p50: number; p99: number; n: number }>;
  idleStreams: number;
  rssMbNoStreams: number;
  rssMbIdleStreams: number;
  commitsPerSecondNoStreams: number;
  commitsPerSecondIdleStreams: number;
  idleWindowSeconds: number;
}

interface Held {
  close(): void;
  /** Resolves when the stream ends (or the client leaves). */
  ended: Promise<void>;
}

/** One stream over node:http: `onMessage` with each message's data and its arrival time. */
type OnMessage = (data: { at: string; reason: string; to: string }, at: number) => void;

export function hold(url: string, headers: Record<string, string>, onMessage: OnMessage): Promise<Held> {
  return new Promise((resolve, reject) => {
    const options = { headers: { ...headers, accept: 'text/event-stream' }, agent: false };
    const req = get(url, options, (res: IncomingMessage) => {
      if (res.statusCode !== 200) {
        res.resume();
        reject(new Error(`stream answered ${res.statusCode}`));
        return;
      }
      let buffer = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        const now = Date.now();
        buffer += chunk;
        let end: number;
        while ((end = buffer.indexOf('\n\n')) >= 0) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          const data = /^data: (.*)$/m.exec(block);
          if (data) onMessage(JSON.parse(data[1]), now);
        }
      });
      resolve({ close: () => req.destroy(), ended: new Promise((done) => res.on('close', () => done())) });
    });
    req.on('error', reject);
  });
}

async function createJob(url: string, headers: Record<string, string>, key: string, provider: string): Promise<string> {
  const res = await fetch(`${url}/v1/jobs`, {
    method: 'POST',
    headers: { ...headers, 'idempotency-key': key },
    body: JSON.stringify({ operation: 'summarize', input: { text: 'sse' }, providers: [provider] }),
  });
  if (res.status !== 201) throw new Error(`create answered ${res.status}`);
  return ((await res.json()) as { id: string }).id;
}

async function commits(pool: pg.Pool): Promise<number> {
  const sql = 'SELECT xact_commit::float8 AS n FROM pg_stat_database WHERE datname = current_database()';
  const rows = (await pool.query(sql)).rows;
  return rows[0].n as number;
}

/** Commits per second over `seconds`, the two reads of the counter excluded. */
async function commitRate(pool: pg.Pool, seconds: number): Promise<number> {
  await pool.query('SELECT pg_stat_clear_snapshot()');
  const before = await commits(pool);
  await sleep(seconds * 1000);
  await pool.query('SELECT pg_stat_clear_snapshot()');
  // pg_stat counters are flushed by each backend about once a second: wait for the last ones.
  await sleep(1500);
  const after = await commits(pool);
  return Math.max(0, after - before - 3) / (seconds + 1.5);
}

export async function sseCase(
  ctx: SseContext,
  options: { jobs?: number; idleStreams?: number; idleSeconds?: number } = {},
): Promise<SseRow> {
  const jobs = options.jobs ?? 200;
  const idleStreams = options.idleStreams ?? 1000;
  const idleSeconds = options.idleSeconds ?? 31;
  const env = {
    MAX_STREAMS_PER_OWNER: String(idleStreams + jobs),
    MAX_STREAMS: String(idleStreams + jobs + 10),
    STREAM_GRACE_MS: '200',
  };

  // 1. Latency: the worker commits, the API process streams.
  const api = await ctx.startService('api', env);
  const worker = await ctx.startService('worker', { WORKER_POLL_MS: '50' });
  const latencies: number[] = [];
  const perReason = new Map<string, number[]>();
  const single: number[] = [];
  let messages = 0;
  try {
    const streams: Held[] = [];
    for (let i = 0; i < jobs; i += 50) {
      const batch = await Promise.all(
        Array.from({ length: Math.min(50, jobs - i) }, async (_, j) => {
          const id = await createJob(api.url, ctx.headers, `sse-${ctx.run}-${i + j}`, 'bench-1s');
          const opened = Date.now();
          return hold(`${api.url}/v1/jobs/${id}/events`, ctx.headers, (data, at) => {
            messages++;
            const committed = Date.parse(data.at);
            // The timeline so far (the creation, before the stream opened) is not a live delivery.
            if (data.reason === 'created' || committed < opened - 5) return;
            latencies.push(at - committed);
            const list = perReason.get(data.reason) ?? [];
            list.push(at - committed);
            perReason.set(data.reason, list);
          });
        }),
      );
      streams.push(...batch);
    }
    await Promise.race([Promise.all(streams.map((s) => s.ended)), sleep(60_000)]);
    for (const s of streams) s.close();
    // One job at a time: each event alone in its transaction's batch.
    for (let i = 0; i < 20; i++) {
      const id = await createJob(api.url, ctx.headers, `sse-one-${ctx.run}-${i}`, 'bench-1s');
      const opened = Date.now();
      const stream = await hold(`${api.url}/v1/jobs/${id}/events`, ctx.headers, (data, at) => {
        const committed = Date.parse(data.at);
        if (data.reason !== 'created' && committed >= opened - 5) single.push(at - committed);
      });
      await Promise.race([stream.ended, sleep(10_000)]);
      stream.close();
    }
  } finally {
    await worker.stop();
    await api.stop();
  }

  // 2. Idle: no worker, so nothing happens to the jobs; the API process holds the streams.
  const idle = await ctx.startService('api', env);
  try {
    const ids: string[] = [];
    for (let i = 0; i < idleStreams; i += 100) {
      const create = (_: unknown, j: number) =>
        createJob(idle.url, ctx.headers, `idle-${ctx.run}-${i + j}`, 'bench-1s');
      ids.push(...(await Promise.all(Array.from({ length: Math.min(100, idleStreams - i) }, create))));
    }
    await sleep(12_000);
    const rssMbNoStreams = ctx.rssMb(idle.child);
    const commitsPerSecondNoStreams = await commitRate(ctx.pool, idleSeconds);
    const held: Held[] = [];
    for (let i = 0; i < ids.length; i += 100) {
      const open = (id: string) => hold(`${idle.url}/v1/jobs/${id}/events`, ctx.headers, () => undefined);
      held.push(...(await Promise.all(ids.slice(i, i + 100).map(open))));
    }
    // The opening's reads are counted in pg_stat_database when their backends flush (up to 10 s when idle).
    await sleep(12_000);
    const commitsPerSecondIdleStreams = await commitRate(ctx.pool, idleSeconds);
    const rssMbIdleStreams = ctx.rssMb(idle.child);
    for (const h of held) h.close();
    return {
      jobs,
      messages,
      commitToSubscriberMs: percentiles(latencies),
      oneAtATimeMs: { ...percentiles(single), n: single.length },
      byReason: Object.fromEntries([...perReason].map(([reason, l]) => [reason, { ...percentiles(l), n: l.length }])),
      idleStreams,
      rssMbNoStreams: Math.round(rssMbNoStreams),
      rssMbIdleStreams: Math.round(rssMbIdleStreams),
      commitsPerSecondNoStreams: Math.round(commitsPerSecondNoStreams * 100) / 100,
      commitsPerSecondIdleStreams: Math.round(commitsPerSecondIdleStreams * 100) / 100,
      idleWindowSeconds: idleSeconds,
    };
  } finally {
    await idle.stop();
  }
}

export function sseTable(row: SseRow): string {
  return [
    '| jobs streamed | messages | commit → subscriber p50 ms | p99 ms | idle streams | RSS MB none → idle | ' +
      'commits/s idle: none → streams |',
    '|---:|---:|---:|---:|---:|---:|---:|',
    `| ${row.jobs} | ${row.messages} | ${row.commitToSubscriberMs.p50} | ${row.commitToSubscriberMs.p99} | ` +
      `${row.idleStreams} | ${row.rssMbNoStreams} → ${row.rssMbIdleStreams} | ` +
      `${row.commitsPerSecondNoStreams} → ${row.commitsPerSecondIdleStreams} |`,
    '',
    `one job at a time: p50 ${row.oneAtATimeMs.p50} ms, p99 ${row.oneAtATimeMs.p99} ms (${row.oneAtATimeMs.n} events)`,
    `by reason (p50/p99 ms): ${Object.entries(row.byReason)
      .map(([reason, p]) => `${reason} ${p.p50}/${p.p99} (${p.n})`)
      .join(', ')}`,
  ].join('\n');
}
