/**
 * The load a failover is measured under (test/race/failover.race-spec.ts, `npm run bench -- --cases failover`):
 * creates at a steady rate, each retried with its own key on 503 or a lost connection as a client would, while a
 * failover happens; then what the clients were told, for the checks and the table.
 */
export interface CreateAnswer {
  key: string;
  /** The last status the client got: 201 or 200 mean acknowledged. */
  status: number;
  id?: string;
  /** Epoch ms of the first request for the key, and of its acknowledgement. */
  sentAt: number;
  ackAt?: number;
  tries: number;
  /** Statuses other than 201/200/503 the client saw for the key (a 500 would be here). */
  unexpected: number[];
}

export interface LoadOptions {
  apiUrl: string;
  apiKey: string;
  keyPrefix: string;
  /** Creates started per second. */
  rate: number;
  durationMs: number;
  body: (i: number) => unknown;
  /** A key is retried this long after its first try (503s, refused connections) before the client gives up. */
  giveUpMs?: number;
}

async function post(url: string, apiKey: string, key: string, body: unknown): Promise<{ status: number; id?: string }> {
  try {
    const res = await fetch(`${url}/v1/jobs`, {
      method: 'POST',
      headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json', 'idempotency-key': key },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(10_000),
    });
    const parsed = (await res.json().catch(() => ({}))) as { id?: string };
    return { status: res.status, id: parsed.id };
  } catch {
    return { status: 0 };
  }
}

/** Runs the load and resolves with one answer per key once every key is acknowledged or given up. */
export async function createLoad(options: LoadOptions): Promise<CreateAnswer[]> {
  const answers: CreateAnswer[] = [];
  const pending: Array<Promise<void>> = [];
  const started = Date.now();
  const giveUpMs = options.giveUpMs ?? 45_000;
  for (let i = 0; Date.now() - started < options.durationMs; i++) {
    const due = started + (i * 1000) / options.rate;
    const wait = due - Date.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    const answer: CreateAnswer = {
      key: `${options.keyPrefix}${i}`,
      status: 0,
      sentAt: Date.now(),
      tries: 0,
      unexpected: [],
    };
    answers.push(answer);
    pending.push(
      (async () => {
        for (;;) {
          answer.tries++;
          const { status, id } = await post(options.apiUrl, options.apiKey, answer.key, options.body(i));
          answer.status = status;
          if (status === 201 || status === 200) {
            answer.id = id;
            answer.ackAt = Date.now();
            return;
          }
          if (status !== 503 && status !== 0) answer.unexpected.push(status);
          if (status !== 503 && status !== 0 && status < 500) return;
          if (Date.now() - answer.sentAt > giveUpMs) return;
          await new Promise((r) => setTimeout(r, 200));
        }
      })(),
    );
  }
  await Promise.all(pending);
  return answers;
}

/**
 * Write unavailability: the longest time without a 201 from the failover's start on (the start itself counts as one
 * end of the first gap), so a switchover whose old primary still took writes for a moment measures the real gap.
 * Undefined when nothing was acknowledged after the start.
 */
export function writeUnavailableMs(answers: CreateAnswer[], failoverAt: number): number | undefined {
  const acks = answers
    .filter((a) => a.ackAt !== undefined && a.status === 201 && a.ackAt >= failoverAt)
    .map((a) => a.ackAt!)
    .sort((x, y) => x - y);
  if (!acks.length) return undefined;
  let gap = 0;
  let previous = failoverAt;
  for (const at of acks) {
    gap = Math.max(gap, at - previous);
    previous = at;
  }
  return gap;
}

export function percentile(values: number[], p: number): number {
  if (!values.length) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))];
}
