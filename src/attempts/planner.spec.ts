import type { ProviderSpec } from '../config/catalog.types.js';
import type { Attempt } from '../ledger/attempt.types.js';
import { backoffMs, type PlanContext, planNext } from './planner.js';

const spec = (name: string, maxAttempts = 2) => ({ name, maxAttempts, maxDeferrals: 2 }) as ProviderSpec;
const limited = (number: number, provider: string, retryAfterMs?: number) =>
  ({
    number,
    provider,
    status: 'failed',
    error: { reason: 'rate_limited', message: 'x', retryable: true, retryAfterMs },
  }) as Attempt;
const attempt = (number: number, provider: string, status: Attempt['status'], retryable?: boolean) =>
  ({
    number,
    provider,
    status,
    error: retryable === undefined ? null : { reason: 'x', message: 'x', retryable },
  }) as Attempt;

function context(attempts: Attempt[], certified: string[] = ['b', 'c']): PlanContext {
  return {
    chain: ['a', 'b', 'c'],
    attempts,
    provider: (n) => spec(n),
    isCertified: async (p) => certified.includes(p),
    random: () => 0.5,
  };
}

describe('planNext', () => {
  it('starts on the primary, without asking for a certification', async () => {
    await expect(planNext(context([], []))).resolves.toEqual({ kind: 'attempt', provider: 'a', delayMs: 0 });
  });

  it('waits while an attempt is live', async () => {
    for (const status of ['starting', 'running', 'unknown'] as const) {
      await expect(planNext(context([attempt(1, 'a', status)]))).resolves.toEqual({ kind: 'wait' });
    }
  });

  it('retries a retryable failure on the same provider with backoff, up to maxAttempts', async () => {
    await expect(planNext(context([attempt(1, 'a', 'failed', true)]))).resolves.toEqual({
      kind: 'attempt',
      provider: 'a',
      delayMs: backoffMs(1, () => 0.5),
    });
    await expect(
      planNext(context([attempt(1, 'a', 'failed', true), attempt(2, 'a', 'failed', true)])),
    ).resolves.toMatchObject({ provider: 'b' });
  });

  it('moves on at once after a non-retryable failure or a cancel, skipping uncertified providers', async () => {
    await expect(planNext(context([attempt(1, 'a', 'failed', false)], ['c']))).resolves.toEqual({
      kind: 'attempt',
      provider: 'c',
      delayMs: 0,
    });
    await expect(planNext(context([attempt(1, 'a', 'cancelled')], ['b']))).resolves.toMatchObject({ provider: 'b' });
  });

  it('is exhausted when no certified provider is left', async () => {
    await expect(planNext(context([attempt(1, 'a', 'failed', false)], []))).resolves.toMatchObject({
      kind: 'exhausted',
    });
  });

  it('waits out a rate limit on the same provider, not counted against maxAttempts, up to maxDeferrals', async () => {
    const twice = [limited(1, 'a', 2000), attempt(2, 'a', 'failed', true), limited(3, 'a', 1500)];
    // Two ordinary failures would exhaust maxAttempts 2; here only one counts.
    await expect(planNext(context(twice))).resolves.toEqual({ kind: 'attempt', provider: 'a', delayMs: 1500 });
    await expect(planNext(context([limited(1, 'a')]))).resolves.toEqual({
      kind: 'attempt',
      provider: 'a',
      delayMs: 1000,
    });
    const thrice = [limited(1, 'a'), limited(2, 'a'), limited(3, 'a')];
    await expect(planNext(context(thrice))).resolves.toEqual({ kind: 'attempt', provider: 'b', delayMs: 0 });
  });

  it('goes past an open breaker to the next certified provider, or defers to the end of its cooldown', async () => {
    const open = (sick: string[]) => (p: string) =>
      sick.includes(p) ? { kind: 'breaker_open' as const, untilMs: 0, delayMs: 3000 } : { kind: 'open' as const };
    await expect(planNext({ ...context([]), gate: open(['a']) })).resolves.toEqual({
      kind: 'attempt',
      provider: 'b',
      delayMs: 0,
    });
    await expect(planNext({ ...context([]), gate: open(['a', 'b']) })).resolves.toEqual({
      kind: 'attempt',
      provider: 'c',
      delayMs: 0,
    });
    await expect(planNext({ ...context([], []), gate: open(['a']) })).resolves.toEqual({
      kind: 'defer',
      provider: 'a',
      delayMs: 3000,
      reason: 'breaker_open',
    });
  });

  it('waits at least a second after a rate limit, whatever Retry-After said (0, or less)', async () => {
    for (const retryAfterMs of [0, -1, 999]) {
      await expect(planNext(context([limited(1, 'a', retryAfterMs)]))).resolves.toEqual({
        kind: 'attempt',
        provider: 'a',
        delayMs: 1000,
      });
    }
  });

  it('defers a briefly paused provider to the end of its pause instead of failing over', async () => {
    const paused = (p: string) =>
      p === 'a' ? { kind: 'paused' as const, untilMs: 0, delayMs: 700 } : { kind: 'open' as const };
    await expect(planNext({ ...context([]), gate: paused })).resolves.toEqual({
      kind: 'defer',
      provider: 'a',
      delayMs: 700,
      reason: 'paused',
    });
  });

  it('goes past a long pause to the next certified provider neither long paused nor open, or defers', async () => {
    const hour = { kind: 'paused' as const, untilMs: 0, delayMs: 3_600_000 };
    const gates =
      (g: Record<string, { kind: 'paused' | 'breaker_open'; untilMs: number; delayMs: number }>) => (p: string) =>
        g[p] ?? { kind: 'open' as const };
    await expect(planNext({ ...context([]), gate: gates({ a: hour }) })).resolves.toEqual({
      kind: 'attempt',
      provider: 'b',
      delayMs: 0,
    });
    await expect(planNext({ ...context([]), gate: gates({ a: hour, b: hour }) })).resolves.toEqual({
      kind: 'attempt',
      provider: 'c',
      delayMs: 0,
    });
    const sick = { kind: 'breaker_open' as const, untilMs: 0, delayMs: 3000 };
    await expect(planNext({ ...context([]), gate: gates({ a: hour, b: sick }) })).resolves.toEqual({
      kind: 'attempt',
      provider: 'c',
      delayMs: 0,
    });
    await expect(planNext({ ...context([], []), gate: gates({ a: hour }) })).resolves.toEqual({
      kind: 'defer',
      provider: 'a',
      delayMs: 3_600_000,
      reason: 'paused',
    });
    // The job that met the hour-long 429 moves on too, without waiting for maxDeferrals.
    await expect(planNext({ ...context([limited(1, 'a', 3_600_000)]), gate: gates({ a: hour }) })).resolves.toEqual({
      kind: 'attempt',
      provider: 'b',
      delayMs: 0,
    });
  });

  it('backs off exponentially with jitter, capped', () => {
    expect(backoffMs(1, () => 0)).toBe(100);
    expect(backoffMs(3, () => 1)).toBe(800);
    expect(backoffMs(30, () => 1)).toBe(10_000);
  });
});
