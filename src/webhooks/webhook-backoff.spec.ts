import { MAX_DELIVERY_ATTEMPTS, retryDelayMs } from './webhook-backoff.js';

describe('retryDelayMs', () => {
  const total = (random: () => number) => {
    let sum = 0;
    for (let attempt = 1; attempt < MAX_DELIVERY_ATTEMPTS; attempt++) sum += retryDelayMs(attempt, 1, random)!;
    return sum;
  };

  it('keeps retrying for more than 24 hours even with the shortest jitter', () => {
    expect(total(() => 0)).toBeGreaterThan(24 * 3_600_000);
  });

  it('grows exponentially from 5 seconds, jittered by at most 20%', () => {
    expect(retryDelayMs(1, 1, () => 0.5)).toBe(5_000);
    expect(retryDelayMs(1, 1, () => 0)).toBe(4_000);
    expect(retryDelayMs(1, 1, () => 1)).toBe(6_000);
    expect(retryDelayMs(2, 1, () => 0.5)).toBe(30_000);
    expect(retryDelayMs(5, 1, () => 0.5)).toBe(3_600_000);
  });

  it('gives up after the last attempt and scales for tests', () => {
    expect(retryDelayMs(MAX_DELIVERY_ATTEMPTS, 1)).toBeNull();
    expect(retryDelayMs(1, 0.001, () => 0.5)).toBe(5);
  });
});
