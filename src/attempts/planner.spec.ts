import type { ProviderSpec } from '../config/catalog.types.js';
import type { Attempt } from '../ledger/attempt.types.js';
import { backoffMs, planNext, type PlanContext } from './planner.js';

const spec = (name: string, maxAttempts = 2) => ({ name, maxAttempts }) as ProviderSpec;
const attempt = (number: number, provider: string, status: Attempt['status'], retryable?: boolean) =>
  ({ number, provider, status, error: retryable === undefined ? null : { reason: 'x', message: 'x', retryable } }) as Attempt;

function context(attempts: Attempt[], certified: string[] = ['b', 'c']): PlanContext {
  return { chain: ['a', 'b', 'c'], attempts, provider: (n) => spec(n), isCertified: async (p) => certified.includes(p), random: () => 0.5 };
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
    await expect(planNext(context([attempt(1, 'a', 'failed', true)]))).resolves.toEqual({ kind: 'attempt', provider: 'a', delayMs: backoffMs(1, () => 0.5) });
    await expect(planNext(context([attempt(1, 'a', 'failed', true), attempt(2, 'a', 'failed', true)]))).resolves.toMatchObject({ provider: 'b' });
  });

  it('moves on at once after a non-retryable failure or a cancel, skipping uncertified providers', async () => {
    await expect(planNext(context([attempt(1, 'a', 'failed', false)], ['c']))).resolves.toEqual({ kind: 'attempt', provider: 'c', delayMs: 0 });
    await expect(planNext(context([attempt(1, 'a', 'cancelled')], ['b']))).resolves.toMatchObject({ provider: 'b' });
  });

  it('is exhausted when no certified provider is left', async () => {
    await expect(planNext(context([attempt(1, 'a', 'failed', false)], []))).resolves.toMatchObject({ kind: 'exhausted' });
  });

  it('backs off exponentially with jitter, capped', () => {
    expect(backoffMs(1, () => 0)).toBe(100);
    expect(backoffMs(3, () => 1)).toBe(800);
    expect(backoffMs(30, () => 1)).toBe(10_000);
  });
});
