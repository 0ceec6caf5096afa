import type { ProviderSpec } from '../config/catalog.types.js';
import { LIVE_ATTEMPT_STATUSES, type Attempt } from './attempt.types.js';

export type Plan = { kind: 'attempt'; provider: string; delayMs: number } | { kind: 'wait' } | { kind: 'exhausted'; lastError: unknown };

export interface PlanContext {
  chain: string[];
  attempts: Attempt[];
  provider: (name: string) => ProviderSpec | undefined;
  /** I6: asked before moving the job to any provider but the primary. */
  isCertified: (provider: string) => Promise<boolean>;
  random?: () => number;
}

const BACKOFF_BASE_MS = 200;
const BACKOFF_CAP_MS = 10_000;

/** Exponential backoff with jitter: between half and all of base * 2^(n-1), capped. */
export function backoffMs(failures: number, random: () => number = Math.random): number {
  const ceiling = Math.min(BACKOFF_CAP_MS, BACKOFF_BASE_MS * 2 ** Math.max(0, failures - 1));
  return Math.round(ceiling / 2 + (random() * ceiling) / 2);
}

/** The next certified provider of the chain after `after` (the primary when `after` is undefined). */
export async function nextProvider(context: PlanContext, after: string | undefined): Promise<string | undefined> {
  if (after === undefined) return context.chain[0];
  for (const candidate of context.chain.slice(context.chain.indexOf(after) + 1)) {
    if (await context.isCertified(candidate)) return candidate;
  }
  return undefined;
}

/**
 * What a job needs next, from its attempts so far (DESIGN §7): nothing while one is live; a retry with backoff
 * on the same provider for a retryable failure within its maxAttempts; otherwise the next certified provider;
 * `exhausted` when the chain is spent.
 */
export async function planNext(context: PlanContext): Promise<Plan> {
  const { attempts } = context;
  if (attempts.some((a) => LIVE_ATTEMPT_STATUSES.includes(a.status))) return { kind: 'wait' };
  const last = attempts.reduce<Attempt | undefined>((latest, a) => (!latest || a.number > latest.number ? a : latest), undefined);
  if (!last) return { kind: 'attempt', provider: context.chain[0], delayMs: 0 };
  if (last.status === 'succeeded') return { kind: 'wait' };
  if (last.status === 'failed' && last.error?.retryable) {
    const failures = attempts.filter((a) => a.provider === last.provider && a.status === 'failed').length;
    const max = context.provider(last.provider)?.maxAttempts ?? 1;
    if (failures < max) return { kind: 'attempt', provider: last.provider, delayMs: backoffMs(failures, context.random) };
  }
  const next = await nextProvider(context, last.provider);
  return next ? { kind: 'attempt', provider: next, delayMs: 0 } : { kind: 'exhausted', lastError: last.error };
}
