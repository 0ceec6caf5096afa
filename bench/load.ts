/** What the bench's process-level cases share: sleeping, percentiles, and sending a backlog of creates over HTTP. */
import { Agent, request as httpRequest } from 'node:http';

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export function percentiles(values: number[]): { p50: number; p99: number } {
  const sorted = [...values].sort((a, b) => a - b);
  const at = (p: number) =>
    sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] : 0;
  return { p50: Math.round(at(50)), p99: Math.round(at(99)) };
}

export interface Backlog {
  prefix: string;
  count: number;
  senders: number;
  provider: string;
  /** The job's whole chain, primary first (default: `[provider]`). */
  providers?: string[];
  text: string;
  /** Spread the creates at this many per second; 0: as fast as the senders go. */
  rate?: number;
}

/**
 * One POST over a keep-alive agent. Not fetch: undici's fetch costs the bench process 1.5 to 2 ms of CPU per
 * request (measured during the pipeline-1s backlog, on a machine whose two cores the service and PostgreSQL share),
 * more than the service's own create; node:http costs a fraction of that, as a load generator should.
 */
export function post(url: URL, agent: Agent, headers: Record<string, string>, body: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const request = httpRequest(
      url,
      { method: 'POST', agent, headers: { ...headers, 'content-length': String(Buffer.byteLength(body)) } },
      (response) => {
        response.resume();
        response.on('end', () => resolve(response.statusCode ?? 0));
        response.on('error', reject);
      },
    );
    request.on('error', reject);
    request.end(body);
  });
}

/** `senders` loops POST `count` jobs for `provider`; with `rate` > 0 they are spread at that many per second. */
export async function createJobs(url: string, headers: Record<string, string>, backlog: Backlog): Promise<void> {
  const { prefix, count, senders, provider, text, rate = 0 } = backlog;
  const started = Date.now();
  const agent = new Agent({ keepAlive: true, maxSockets: senders });
  const target = new URL('/v1/jobs', url);
  const body = JSON.stringify({ operation: 'summarize', input: { text }, providers: backlog.providers ?? [provider] });
  let next = 0;
  try {
    await Promise.all(
      Array.from({ length: senders }, async () => {
        for (;;) {
          const i = next++;
          if (i >= count) return;
          if (rate > 0) await sleep(Math.max(0, started + (i * 1000) / rate - Date.now()));
          const status = await post(target, agent, { ...headers, 'idempotency-key': `${prefix}-${i}` }, body);
          if (status !== 201) throw new Error(`create answered ${status}`);
        }
      }),
    );
  } finally {
    agent.destroy();
  }
}

export interface PacedCreates {
  prefix: string;
  /** Creates per second, sent on schedule whatever the answers' latency (an open loop). */
  rate: number;
  /** Stop after this many seconds, or when `stop()` answers true (checked every create). */
  seconds: number;
  stop?: () => boolean;
  provider: string;
  text: string;
  /** Each create's latency in ms as its answer arrives (201s only; others are counted in the result). */
  onLatency: (ms: number, at: number) => void;
}

/**
 * Creates at a steady `rate`, each sent at its time on its own request (up to 256 open at once): the latency of each
 * is what a client waiting on it sees, queueing included, rather than the closed loop's back-to-back figure.
 */
export async function pacedCreates(
  url: string,
  headers: Record<string, string>,
  paced: PacedCreates,
): Promise<{ sent: number; failed: number }> {
  const agent = new Agent({ keepAlive: true, maxSockets: 256 });
  const target = new URL('/v1/jobs', url);
  const body = JSON.stringify({ operation: 'summarize', input: { text: paced.text }, providers: [paced.provider] });
  const started = Date.now();
  const inFlight = new Set<Promise<void>>();
  let failed = 0;
  let i = 0;
  try {
    for (; Date.now() - started < paced.seconds * 1000 && !paced.stop?.(); i++) {
      await sleep(Math.max(0, started + (i * 1000) / paced.rate - Date.now()));
      const t0 = performance.now();
      const sent = post(target, agent, { ...headers, 'idempotency-key': `${paced.prefix}-${i}` }, body).then(
        (status) => {
          if (status === 201) paced.onLatency(performance.now() - t0, Date.now());
          else failed++;
        },
        () => void failed++,
      );
      const tracked = sent.finally(() => inFlight.delete(tracked));
      inFlight.add(tracked);
    }
    await Promise.all(inFlight);
  } finally {
    agent.destroy();
  }
  return { sent: i, failed };
}
