import type { ProviderSpec } from '../config/catalog.types.js';
import {
  afterAnswer,
  afterFailure,
  blankProviderState,
  gateOf,
  grant,
  type ProviderState,
  roomFor,
} from './capacity.rules.js';

const T0 = new Date('2026-11-30T10:00:00.000Z');
const at = (ms: number) => new Date(T0.getTime() + ms);

function state(overrides: Partial<ProviderState> = {}): ProviderState {
  return { ...blankProviderState('p', T0), ...overrides };
}

const spec = (extra: Partial<ProviderSpec>) =>
  ({ name: 'p', hardTimeoutMs: 10_000, maxDeferrals: 3, ...extra }) as ProviderSpec;

describe('grant', () => {
  it('admits calls up to maxConcurrency minus the live leases', () => {
    expect(grant(state({ inFlight: 3 }), spec({ maxConcurrency: 5 }), [0, 0, 0, 0])).toMatchObject({
      granted: 2,
      refusal: 'concurrency',
    });
    expect(grant(state({ inFlight: 5 }), spec({ maxConcurrency: 5 }), [0])).toMatchObject({
      granted: 0,
      refusal: 'concurrency',
    });
  });

  it('holds one second of requestsPerMinute and refills continuously', () => {
    const rpm = spec({ requestsPerMinute: 60 });
    const first = grant(state(), rpm, [0, 0]);
    expect(first).toMatchObject({ granted: 1, refusal: 'requests_per_minute' });
    // 500 ms later half a request has come back: nothing yet; at 1000 ms one.
    expect(grant({ ...first.state, now: at(500) }, rpm, [0])).toMatchObject({ granted: 0 });
    expect(grant({ ...first.state, now: at(1000) }, rpm, [0])).toMatchObject({ granted: 1 });
    // A long idle spell does not bank more than one second's worth.
    expect(grant({ ...first.state, now: at(60_000) }, rpm, [0, 0, 0])).toMatchObject({ granted: 1 });
    expect(grant(state(), spec({ requestsPerMinute: 600 }), Array(20).fill(0))).toMatchObject({ granted: 10 });
  });

  it('lets a call larger than the token bucket take a full bucket into debt, then waits for it to be repaid', () => {
    const tpm = spec({ tokensPerMinute: 6000 }); // 100 tokens per second, bucket of 100
    const big = grant(state(), tpm, [250, 10]);
    expect(big).toMatchObject({ granted: 1, refusal: 'tokens_per_minute' });
    expect(big.state.tokenBucket).toBe(-150);
    expect(grant({ ...big.state, now: at(1500) }, tpm, [10])).toMatchObject({ granted: 0 });
    expect(grant({ ...big.state, now: at(1700) }, tpm, [10])).toMatchObject({ granted: 1 });
  });

  it('grants nothing while paused or the breaker is open, and exactly one probe after the cooldown', () => {
    const s = spec({ breaker: { failures: 2, windowMs: 1000, cooldownMs: 500 } });
    expect(grant(state({ pausedUntil: at(100) }), s, [0])).toMatchObject({ granted: 0, refusal: 'paused' });
    const open = state({ breaker: 'open', breakerUntil: at(500) });
    expect(grant(open, s, [0])).toMatchObject({ granted: 0, refusal: 'breaker_open' });
    const probing = grant({ ...open, now: at(500) }, s, [0, 0, 0]);
    expect(probing).toMatchObject({ granted: 1, probe: true, refusal: 'breaker_open' });
    expect(probing.state).toMatchObject({ breaker: 'half_open', breakerUntil: at(500 + 10_000 + 5_000) });
    // While the probe is out, nothing else goes.
    expect(gateOf({ ...probing.state, now: at(600) })).toMatchObject({ kind: 'breaker_open' });
  });

  it('counts this minute for the providers view', () => {
    const first = grant(state(), spec({ requestsPerMinute: 6000 }), [5, 7]);
    expect(first.state).toMatchObject({ requestsInWindow: 2, tokensInWindow: 12, windowStart: T0 });
    expect(grant({ ...first.state, now: at(61_000) }, spec({ requestsPerMinute: 6000 }), [1]).state).toMatchObject({
      requestsInWindow: 1,
    });
  });
});

describe('breaker', () => {
  const s = spec({ breaker: { failures: 3, windowMs: 1000, cooldownMs: 2000 } });

  it('opens after `failures` counted failures within the window, for the cooldown', () => {
    let current = state();
    for (const ms of [0, 400, 1500, 1600]) {
      const next = afterFailure({ ...current, now: at(ms) }, s, 'x');
      expect(next.transition).toBeUndefined(); // the first two fell out of the window before the fourth
      current = next.state;
    }
    const opened = afterFailure({ ...current, now: at(1700) }, s, 'x');
    expect(opened.transition).toEqual({ from: 'closed', to: 'open' });
    expect(opened.state).toMatchObject({ breaker: 'open', breakerUntil: at(3700) });
  });

  it("closes on the probe's answer and opens again on its failure; other attempts change nothing", () => {
    const half = state({ breaker: 'half_open', probeAttemptId: 'probe', breakerUntil: at(9000) });
    expect(afterAnswer(half, 'other').transition).toBeUndefined();
    expect(afterAnswer(half, 'probe')).toMatchObject({
      transition: { from: 'half_open', to: 'closed' },
      state: { breaker: 'closed', failures: [] },
    });
    expect(afterFailure(half, s, 'probe')).toMatchObject({
      transition: { from: 'half_open', to: 'open' },
      state: { breakerUntil: at(2000) },
    });
  });

  it('gives waiting jobs the room the provider has now, none while paused; an open breaker holds none back', () => {
    expect(roomFor(state({ inFlight: 2 }), spec({ maxConcurrency: 2 }), 64)).toBe(0);
    expect(roomFor(state({ inFlight: 1 }), spec({ maxConcurrency: 5 }), 64)).toBe(4);
    expect(roomFor(undefined, spec({ maxConcurrency: 5 }), 3)).toBe(3);
    expect(roomFor(state({ requestBucket: 0.2, refilledAt: T0 }), spec({ requestsPerMinute: 60 }), 64)).toBe(0);
    expect(roomFor(state({ requestBucket: 0.2, refilledAt: at(-900) }), spec({ requestsPerMinute: 60 }), 64)).toBe(1);
    expect(roomFor(state({ pausedUntil: at(10) }), spec({ maxConcurrency: 5 }), 64)).toBe(0);
    // A long pause holds none back either: they are planned past it, or deferred to its end.
    expect(roomFor(state({ pausedUntil: at(3_600_000) }), spec({ maxConcurrency: 5 }), 64)).toBe(64);
    expect(
      roomFor(
        state({ breaker: 'open', breakerUntil: at(1000) }),
        spec({ breaker: { failures: 1, windowMs: 1, cooldownMs: 1 } }),
        64,
      ),
    ).toBe(64);
    expect(roomFor(undefined, spec({}), 64)).toBe(64);
  });
});
