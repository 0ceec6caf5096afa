import { expiryOf, UsageError } from './key-expiry.js';

describe('expiryOf', () => {
  const now = Date.parse('2026-01-01T00:00:00Z');

  it('reads --expires-in in minutes, hours or days from now', () => {
    expect(expiryOf('90m', undefined, now)?.toISOString()).toBe('2026-01-01T01:30:00.000Z');
    expect(expiryOf('12h', undefined, now)?.toISOString()).toBe('2026-01-01T12:00:00.000Z');
    expect(expiryOf('30d', undefined, now)?.toISOString()).toBe('2026-01-31T00:00:00.000Z');
  });

  it('reads --expires-at as an ISO-8601 time in the future', () => {
    expect(expiryOf(undefined, '2027-06-01T12:00:00Z', now)?.toISOString()).toBe('2027-06-01T12:00:00.000Z');
  });

  it('means no expiry when neither is given', () => {
    expect(expiryOf(undefined, undefined, now)).toBeNull();
  });

  it.each([
    ['30', undefined],
    ['0d', undefined],
    ['1w', undefined],
    [undefined, 'tomorrow'],
    [undefined, '2025-01-01T00:00:00Z'],
    ['1d', '2027-01-01T00:00:00Z'],
  ])('refuses --expires-in %p / --expires-at %p', (expiresIn, expiresAt) => {
    expect(() => expiryOf(expiresIn, expiresAt, now)).toThrow(UsageError);
  });
});
