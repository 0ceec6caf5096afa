import { type Gate, pauseMsFor, SHORT_PAUSE_MS } from '../capacity/capacity.rules.js';
import type { ProviderSpec } from '../config/catalog.types.js';
import { type Attempt, LIVE_ATTEMPT_STATUSES, NOT_SENT } from '../ledger/attempt.types.js';
import { RATE_LIMITED } from '../providers/provider.port.js';

export type Plan =
  | { kind: 'attempt'; provider: string; delayMs: number }
  | { kind: 'wait' }
  /**
   * The provider is paused or its breaker open, and no certified fallback is usable: the job waits on it (pending)
   * for at most `delayMs`, less if it opens sooner.
   */
  | { kind: 'defer'; provider: string; delayMs: number; reason: 'paused' | 'breaker_open' }
  | { kind: 'exhausted'; reason: 'providers_exhausted' | 'provider_unavailable'; lastError: unknown };

export interface PlanContext {
  chain: string[];
  attempts: Attempt[];
  /** Undefined for a provider that left the catalog: it is skipped like an uncertified one. */
  provider: (name: string) => ProviderSpec | undefined;
  /** I6: asked before moving the job to any provider but the primary. */
  isCertified: (provider: string) => Promise<boolean>;
  /** Paused or breaker open (docs/design.md#capacity); open when absent. */
  gate?: (provider: string) => Gate;
  random?: () => number;
}

const BACKOFF_BASE_MS = 200;
const BACKOFF_CAP_MS = 10_000;

/** Exponential backoff with jitter: between half and all of base * 2^(n-1), capped. */
export function backoffMs(failures: number, random: () => number = Math.random): number {
  const ceiling = Math.min(BACKOFF_CAP_MS, BACKOFF_BASE_MS * 2 ** Math.max(0, failures - 1));
  return Math.round(ceiling / 2 + (random() * ceiling) / 2);
}

/** True for an attempt that provably never reached its provider (I4): it costs the job nothing. */
export function wasNotSent(attempt: Attempt): boolean {
  return attempt.status === 'failed' && attempt.error?.reason === NOT_SENT;
}

/** True for an attempt the provider refused with a rate limit: not counted against maxAttempts either. */
export function wasRateLimited(attempt: Attempt): boolean {
  return attempt.status === 'failed' && attempt.error?.reason === RATE_LIMITED;
}

/**
 * The next usable provider of the chain after `after` (from the start when undefined): in the catalog, and
 * certified unless it is the primary. `skip`: gates that rule a candidate out (an open breaker, a long pause).
 */
export async function nextProvider(
  context: PlanContext,
  after: string | undefined,
  skip: (gate: Gate) => boolean = () => false,
): Promise<string | undefined> {
  const start = after === undefined ? 0 : context.chain.indexOf(after) + 1;
  for (const [i, candidate] of context.chain.entries()) {
    if (i < start || !context.provider(candidate)) continue;
    if (context.gate && skip(context.gate(candidate))) continue;
    if (i === 0 || (await context.isCertified(candidate))) return candidate;
  }
  return undefined;
}

/** A pause with more than SHORT_PAUSE_MS left: not worth waiting for when a certified fallback is free. */
const longPause = (gate: Gate) => gate.kind === 'paused' && gate.delayMs > SHORT_PAUSE_MS;

/**
 * The capacity gate on a chosen provider: an open breaker, or a long pause (the provider's own 429 with a long
 * Retry-After), sends the job on to the next certified provider that is neither, without an attempt on the gated
 * one; otherwise, and for a short pause, the job is deferred to the end of the cooldown or pause.
 */
async function gated(context: PlanContext, plan: Extract<Plan, { kind: 'attempt' }>): Promise<Plan> {
  const gate = context.gate?.(plan.provider) ?? { kind: 'open' };
  if (gate.kind === 'open') return plan;
  if (gate.kind === 'breaker_open') {
    const other = await nextProvider(context, plan.provider, (g) => g.kind === 'breaker_open');
    if (other) return { kind: 'attempt', provider: other, delayMs: 0 };
  } else if (longPause(gate)) {
    const other = await nextProvider(context, plan.provider, (g) => g.kind === 'breaker_open' || longPause(g));
    if (other) return { kind: 'attempt', provider: other, delayMs: 0 };
  }
  return { kind: 'defer', provider: plan.provider, delayMs: Math.max(plan.delayMs, gate.delayMs), reason: gate.kind };
}

/**
 * What a job needs next, from its attempts so far (docs/design.md#7-execution): nothing while one is live; an
 * attempt that was never sent is simply made again; after a rate limit, the same provider once its pause is over,
 * up to maxDeferrals times; a retry with backoff on the same provider for a retryable failure within its
 * maxAttempts; otherwise the next certified provider; `exhausted` when the chain is spent. Then the capacity gate
 * (docs/design.md#capacity) may move the attempt past an open breaker or defer it.
 */
export async function planNext(context: PlanContext): Promise<Plan> {
  const plan = await planIgnoringCapacity(context);
  return plan.kind === 'attempt' ? gated(context, plan) : plan;
}

async function planIgnoringCapacity(context: PlanContext): Promise<Plan> {
  const { attempts } = context;
  if (attempts.some((a) => LIVE_ATTEMPT_STATUSES.includes(a.status))) return { kind: 'wait' };
  const last = attempts.reduce<Attempt | undefined>(
    (latest, a) => (!latest || a.number > latest.number ? a : latest),
    undefined,
  );
  const unavailable = (lastError: unknown): Plan => ({
    kind: 'exhausted',
    reason: 'provider_unavailable',
    lastError: lastError ?? {
      reason: 'provider_unavailable',
      message: 'No provider of the chain is in the catalog any more.',
    },
  });
  if (!last) {
    const first = await nextProvider(context, undefined);
    return first ? { kind: 'attempt', provider: first, delayMs: 0 } : unavailable(undefined);
  }
  if (last.status === 'succeeded') return { kind: 'wait' };
  const spec = context.provider(last.provider);
  if (wasNotSent(last) && spec) return { kind: 'attempt', provider: last.provider, delayMs: 0 };
  if (wasRateLimited(last) && spec) {
    // The provider limited us, the job did nothing wrong: wait as long as it asked, up to maxDeferrals times.
    const deferrals = attempts.filter((a) => a.provider === last.provider && wasRateLimited(a)).length;
    if (deferrals <= spec.maxDeferrals) {
      return { kind: 'attempt', provider: last.provider, delayMs: pauseMsFor(last.error?.retryAfterMs) };
    }
  } else if (last.status === 'failed' && last.error?.retryable && spec) {
    const failures = attempts.filter(
      (a) => a.provider === last.provider && a.status === 'failed' && !wasNotSent(a) && !wasRateLimited(a),
    ).length;
    if (failures < spec.maxAttempts) {
      return { kind: 'attempt', provider: last.provider, delayMs: backoffMs(failures, context.random) };
    }
  }
  const next = await nextProvider(context, last.provider);
  if (next) return { kind: 'attempt', provider: next, delayMs: 0 };
  const anyInCatalog = context.chain.some((name) => context.provider(name));
  return anyInCatalog
    ? { kind: 'exhausted', reason: 'providers_exhausted', lastError: last.error }
    : unavailable(last.error);
}
