import { definitiveHttpError, RATE_LIMITED, retryAfterFromHeaders } from './provider.port.js';

describe('rate-limit answers', () => {
  const now = Date.parse('2026-11-30T10:00:00Z');

  it('reads the longest of retry-after-ms, Retry-After (seconds or a date) and the x-ratelimit-reset headers', () => {
    expect(retryAfterFromHeaders({ 'retry-after': '2' }, now)).toBe(2000);
    expect(retryAfterFromHeaders(new Headers({ 'retry-after-ms': '350' }), now)).toBe(350);
    expect(retryAfterFromHeaders({ 'retry-after': 'Mon, 30 Nov 2026 10:00:05 GMT' }, now)).toBe(5000);
    expect(
      retryAfterFromHeaders({ 'x-ratelimit-reset-requests': '6m0s', 'x-ratelimit-reset-tokens': '20ms' }, now),
    ).toBe(360_000);
    expect(retryAfterFromHeaders({ 'x-ratelimit-reset-tokens': '1.5s', 'retry-after': '1' }, now)).toBe(1500);
  });

  it('ignores what it cannot read, and caps a hostile value at an hour', () => {
    expect(
      retryAfterFromHeaders({ 'retry-after': 'soon', 'x-ratelimit-reset-requests': '5 minutes' }, now),
    ).toBeUndefined();
    expect(retryAfterFromHeaders(undefined)).toBeUndefined();
    expect(retryAfterFromHeaders({ 'retry-after': '99999999' }, now)).toBe(3_600_000);
  });

  it('classifies 429, and 503 with Retry-After, as rate_limited; a bare 503 stays a plain retryable failure', () => {
    expect(definitiveHttpError(429)).toMatchObject({ reason: RATE_LIMITED, retryable: true, retryAfterMs: undefined });
    expect(definitiveHttpError(503, undefined, { 'retry-after': '3' })).toMatchObject({
      reason: RATE_LIMITED,
      retryAfterMs: 3000,
      status: 503,
    });
    expect(definitiveHttpError(503)).toMatchObject({ reason: 'http_503', retryable: true });
  });
});
