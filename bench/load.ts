/** What the bench's process-level cases share: sleeping, percentiles, and sending a backlog of creates over HTTP. */

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export function percentiles(values: number[]): { p50: number; p99: number } {
  const sorted = [...values].sort((a, b) => a - b);
  const at = (p: number) => (sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] : 0);
  return { p50: Math.round(at(50)), p99: Math.round(at(99)) };
}

export interface Backlog {
  prefix: string;
  count: number;
  senders: number;
  provider: string;
  text: string;
  /** Spread the creates at this many per second; 0: as fast as the senders go. */
  rate?: number;
}

/** `senders` loops POST `count` jobs for `provider`; with `rate` > 0 they are spread at that many per second. */
export async function createJobs(url: string, headers: Record<string, string>, backlog: Backlog): Promise<void> {
  const { prefix, count, senders, provider, text, rate = 0 } = backlog;
  const started = Date.now();
  let next = 0;
  await Promise.all(
    Array.from({ length: senders }, async () => {
      for (;;) {
        const i = next++;
        if (i >= count) return;
        if (rate > 0) await sleep(Math.max(0, started + (i * 1000) / rate - Date.now()));
        const res = await fetch(`${url}/v1/jobs`, {
          method: 'POST',
          headers: { ...headers, 'idempotency-key': `${prefix}-${i}` },
          body: JSON.stringify({ operation: 'summarize', input: { text }, providers: [provider] }),
        });
        if (res.status !== 201) throw new Error(`create answered ${res.status}`);
        await res.arrayBuffer();
      }
    }),
  );
}
