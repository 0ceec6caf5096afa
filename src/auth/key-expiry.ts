/** Expiry of an API key as `npm run apikey -- create` takes it. */
const UNIT_MS: Record<string, number> = { m: 60_000, h: 3_600_000, d: 86_400_000 };

export class UsageError extends Error {}

/** `--expires-in 90m | 12h | 30d` or `--expires-at 2027-01-01T00:00:00Z`; neither: the key does not expire. */
export function expiryOf(expiresIn: string | undefined, expiresAt: string | undefined, now = Date.now()): Date | null {
  if (expiresIn !== undefined && expiresAt !== undefined) {
    throw new UsageError('give --expires-in or --expires-at, not both');
  }
  if (expiresIn !== undefined) {
    const match = /^([1-9]\d{0,5})([mhd])$/.exec(expiresIn.trim());
    if (!match) throw new UsageError('--expires-in must be a number followed by m, h or d (for example 30d)');
    return new Date(now + Number(match[1]) * UNIT_MS[match[2]]);
  }
  if (expiresAt !== undefined) {
    const at = new Date(expiresAt);
    if (!/^\d{4}-\d{2}-\d{2}T/.test(expiresAt) || Number.isNaN(at.getTime())) {
      throw new UsageError('--expires-at must be an ISO-8601 date and time');
    }
    if (at.getTime() <= now) throw new UsageError('--expires-at must be in the future');
    return at;
  }
  return null;
}
