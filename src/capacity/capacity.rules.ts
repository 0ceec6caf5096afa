import { LEASE_SLACK_MS, type ProviderSpec } from '../config/catalog.types.js';

export type BreakerState = 'closed' | 'open' | 'half_open';

/** One provider's shared state, as read from provider_state with its live leases, on the database's clock. */
export interface ProviderState {
  provider: string;
  pausedUntil: Date | null;
  breaker: BreakerState;
  breakerSince: Date | null;
  /** open: the end of the cooldown; half_open: the end of the probe's lease. */
  breakerUntil: Date | null;
  probeAttemptId: string | null;
  failures: Date[];
  /** null: never used, so full. */
  requestBucket: number | null;
  tokenBucket: number | null;
  refilledAt: Date | null;
  windowStart: Date | null;
  requestsInWindow: number;
  tokensInWindow: number;
  /** Leases not expired: calls in flight across replicas (providers with maxConcurrency only). */
  inFlight: number;
  now: Date;
}

/** A provider nobody has state of yet: what provider_state's column defaults are. */
export function blankProviderState(provider: string, now: Date): ProviderState {
  return {
    provider,
    pausedUntil: null,
    breaker: 'closed',
    breakerSince: null,
    breakerUntil: null,
    probeAttemptId: null,
    failures: [],
    requestBucket: null,
    tokenBucket: null,
    refilledAt: null,
    windowStart: null,
    requestsInWindow: 0,
    tokensInWindow: 0,
    inFlight: 0,
    now,
  };
}

/** What the planner needs to know of a provider before it picks it for a new attempt. */
export type Gate = { kind: 'open' } | { kind: 'paused' | 'breaker_open'; untilMs: number; delayMs: number };

export type Refusal = 'concurrency' | 'requests_per_minute' | 'tokens_per_minute' | 'paused' | 'breaker_open';

/**
 * How long a call's lease (and a half-open probe's turn) lasts from its claim: the call's hard timeout and the
 * slack.
 */
export const leaseTtlMs = (spec: ProviderSpec) => spec.hardTimeoutMs + LEASE_SLACK_MS;

/**
 * A rate-limit answer pauses its provider at least this long, whatever it asked: a `Retry-After` of 0, a negative
 * one or an HTTP date in the past would otherwise send the next call at once, and a chain would be spent in a
 * blink on a provider that is limiting us.
 */
export const MIN_PAUSE_MS = 1_000;

/** Without a usable Retry-After, a rate-limit answer pauses its provider this long. */
export const DEFAULT_PAUSE_MS = 1_000;

/** How long a rate-limit answer pauses its provider: what it asked, never less than MIN_PAUSE_MS. */
export const pauseMsFor = (retryAfterMs: number | undefined) =>
  Math.max(MIN_PAUSE_MS, retryAfterMs ?? DEFAULT_PAUSE_MS);

/**
 * A pause with more than this left is a long one: a job with a certified fallback goes there rather than wait it
 * out (as past an open breaker), and jobs waiting for capacity on the provider are claimed to be planned past it.
 * A shorter one is waited out on the provider the job prefers.
 */
export const SHORT_PAUSE_MS = 5_000;

/** Whether calls to this provider need the shared state locked before they start. */
export function isGated(spec: ProviderSpec): boolean {
  return (
    spec.maxConcurrency !== undefined ||
    spec.requestsPerMinute !== undefined ||
    spec.tokensPerMinute !== undefined ||
    spec.breaker !== undefined
  );
}

/** A provider capped by maxConcurrency alone: a finished call's lease may pass straight to the next call. */
export function handsOver(spec: ProviderSpec): boolean {
  return (
    spec.maxConcurrency !== undefined &&
    spec.requestsPerMinute === undefined &&
    spec.tokensPerMinute === undefined &&
    spec.breaker === undefined
  );
}

/**
 * Token buckets refilled continuously at the per-minute rate, holding one second's worth (at least one request or
 * token): providers enforce per-minute limits over shorter periods, so a whole minute's burst would be refused.
 */
export function bucketShape(perMinute: number): { capacity: number; perMs: number } {
  return { capacity: Math.max(1, perMinute / 60), perMs: perMinute / 60_000 };
}

function refilled(level: number | null, perMinute: number | undefined, state: ProviderState): number | null {
  if (perMinute === undefined) return null;
  const { capacity, perMs } = bucketShape(perMinute);
  if (level === null || state.refilledAt === null) return capacity;
  return Math.min(capacity, level + Math.max(0, state.now.getTime() - state.refilledAt.getTime()) * perMs);
}

/** The state with its buckets refilled up to `now`. */
export function refill(state: ProviderState, spec: ProviderSpec): ProviderState {
  return {
    ...state,
    requestBucket: refilled(state.requestBucket, spec.requestsPerMinute, state),
    tokenBucket: refilled(state.tokenBucket, spec.tokensPerMinute, state),
    refilledAt: state.now,
  };
}

/** Paused by a rate-limit answer, or breaker open (or half-open with its probe in flight); open otherwise. */
export function gateOf(state: ProviderState | undefined): Gate {
  if (!state) return { kind: 'open' };
  const now = state.now.getTime();
  const until = (kind: 'paused' | 'breaker_open', at: Date): Gate => ({
    kind,
    untilMs: at.getTime(),
    delayMs: at.getTime() - now,
  });
  if (state.pausedUntil && state.pausedUntil.getTime() > now) return until('paused', state.pausedUntil);
  if (state.breaker !== 'closed' && state.breakerUntil && state.breakerUntil.getTime() > now) {
    return until('breaker_open', state.breakerUntil);
  }
  return { kind: 'open' };
}

/**
 * How many of the jobs waiting for capacity on this provider a claim should take now, at most `limit`: none while
 * it is paused for a short while, at its concurrency cap or out of tokens. An open breaker or a long pause does not
 * hold them: they are claimed and planned past it (jobs deferred to its end wait by their next_attempt_at instead).
 */
export function roomFor(state: ProviderState | undefined, spec: ProviderSpec, limit: number): number {
  if (!isGated(spec)) return limit;
  let room = limit;
  if (spec.maxConcurrency !== undefined) room = Math.min(room, spec.maxConcurrency - (state?.inFlight ?? 0));
  if (!state) return Math.max(0, room);
  const gate = gateOf(state);
  if (gate.kind === 'paused') return gate.delayMs > SHORT_PAUSE_MS ? limit : 0;
  if (gate.kind === 'breaker_open') return limit; // planned past the open breaker, whatever its leases
  const fresh = refill(state, spec);
  if (fresh.requestBucket !== null) room = Math.min(room, Math.floor(fresh.requestBucket));
  if (fresh.tokenBucket !== null && fresh.tokenBucket <= 0) room = 0;
  return Math.max(0, room);
}

export interface Grant {
  /** How many of the calls asked for (a prefix, in order) may start. */
  granted: number;
  /** Why the rest may not; undefined when all were granted. */
  refusal?: Refusal;
  /** The first granted call is the half-open probe. */
  probe: boolean;
  state: ProviderState;
}

/**
 * Under the provider's row lock: which of `costs` (tokens per call, in claim order) may start now. A paused
 * provider or an open breaker grants nothing; a breaker whose cooldown is over grants exactly one call, the probe.
 * A call costing more tokens than the bucket holds waits for a full bucket and takes it into debt.
 */
export function grant(state: ProviderState, spec: ProviderSpec, costs: number[]): Grant {
  const next = refill(state, spec);
  const now = state.now.getTime();
  const gate = gateOf(state);
  if (gate.kind !== 'open') return { granted: 0, refusal: gate.kind, probe: false, state: next };
  let limit = costs.length;
  let probe = false;
  if (next.breaker !== 'closed') {
    // Cooldown over (or the last probe's lease ran out): one probe decides.
    probe = true;
    limit = Math.min(limit, 1);
    next.breaker = 'half_open';
    next.breakerSince = state.now;
    next.breakerUntil = new Date(now + leaseTtlMs(spec));
  }
  let refusal: Refusal | undefined;
  if (spec.maxConcurrency !== undefined && limit > spec.maxConcurrency - state.inFlight) {
    limit = Math.max(0, spec.maxConcurrency - state.inFlight);
    refusal = 'concurrency';
  }
  const windowStart = Math.floor(now / 60_000) * 60_000;
  if (next.windowStart?.getTime() !== windowStart) {
    next.windowStart = new Date(windowStart);
    next.requestsInWindow = 0;
    next.tokensInWindow = 0;
  }
  let granted = 0;
  for (; granted < limit; granted++) {
    if (next.requestBucket !== null && next.requestBucket < 1) {
      refusal = 'requests_per_minute';
      break;
    }
    const cost = costs[granted];
    if (next.tokenBucket !== null && next.tokenBucket < Math.min(cost, bucketShape(spec.tokensPerMinute!).capacity)) {
      refusal = 'tokens_per_minute';
      break;
    }
    if (next.requestBucket !== null) next.requestBucket -= 1;
    if (next.tokenBucket !== null) next.tokenBucket -= cost;
    next.requestsInWindow += 1;
    next.tokensInWindow += cost;
  }
  if (granted < costs.length) refusal ??= 'breaker_open';
  if (probe && granted === 0) {
    // No probe went out after all (no room): the breaker stays as it was.
    next.breaker = state.breaker;
    next.breakerSince = state.breakerSince;
    next.breakerUntil = state.breakerUntil;
    probe = false;
  }
  return { granted, refusal: granted < costs.length ? refusal : undefined, probe, state: next };
}

/** After a refusal by a rate bucket: how long until the next call (costing `cost` tokens) fits; undefined otherwise. */
export function msUntilRoom(state: ProviderState, spec: ProviderSpec, cost: number): number | undefined {
  const waits: number[] = [];
  if (spec.requestsPerMinute !== undefined && state.requestBucket !== null && state.requestBucket < 1) {
    waits.push((1 - state.requestBucket) / bucketShape(spec.requestsPerMinute).perMs);
  }
  if (spec.tokensPerMinute !== undefined && state.tokenBucket !== null) {
    const { capacity, perMs } = bucketShape(spec.tokensPerMinute);
    const need = Math.min(cost, capacity);
    if (state.tokenBucket < need) waits.push((need - state.tokenBucket) / perMs);
  }
  return waits.length ? Math.ceil(Math.max(...waits)) : undefined;
}

export interface Transition {
  from: BreakerState;
  to: BreakerState;
}

/**
 * A counted failure (docs/design.md#capacity): kept while within the window; `failures` of them open a closed
 * breaker, and the probe's failure opens a half-open one again, each for a full cooldown.
 */
export function afterFailure(
  state: ProviderState,
  spec: ProviderSpec,
  attemptId: string,
): { state: ProviderState; transition?: Transition } {
  const breaker = spec.breaker;
  if (!breaker) return { state };
  const now = state.now.getTime();
  const failures = [...state.failures.filter((t) => t.getTime() > now - breaker.windowMs), state.now];
  const next: ProviderState = { ...state, failures };
  const probeFailed = state.breaker === 'half_open' && state.probeAttemptId === attemptId;
  if ((state.breaker === 'closed' && failures.length >= breaker.failures) || probeFailed) {
    next.breaker = 'open';
    next.breakerSince = state.now;
    next.breakerUntil = new Date(now + breaker.cooldownMs);
    next.probeAttemptId = null;
    return { state: next, transition: { from: state.breaker, to: 'open' } };
  }
  return { state: next };
}

/** The probe was answered: the breaker closes and its count starts afresh. Any other answer changes nothing. */
export function afterAnswer(
  state: ProviderState,
  attemptId: string,
): { state: ProviderState; transition?: Transition } {
  if (state.breaker !== 'half_open' || state.probeAttemptId !== attemptId) return { state };
  return {
    state: {
      ...state,
      breaker: 'closed',
      breakerSince: state.now,
      breakerUntil: null,
      probeAttemptId: null,
      failures: [],
    },
    transition: { from: 'half_open', to: 'closed' },
  };
}
