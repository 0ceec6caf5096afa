/**
 * The retry schedule after each failed attempt: about 34 hours in all, so a receiver down for a day still gets
 * every event. Each wait is jittered by ±20% so deliveries that failed together do not return together.
 */
export const RETRY_SCHEDULE_MS = [
  5_000, 30_000, 120_000, 600_000, 3_600_000, 10_800_000, 21_600_000, 43_200_000, 43_200_000,
];
export const MAX_DELIVERY_ATTEMPTS = RETRY_SCHEDULE_MS.length + 1;
/** An endpoint failing this long (every attempt of every event since) is disabled. */
export const DISABLE_AFTER_FAILING_MS = 3 * 24 * 3_600_000;
/** ... or after this many events in a row failed every attempt. */
export const DISABLE_AFTER_FAILED_EVENTS = 5;

/** The wait before the next attempt after attempt `attempt` (1-based) failed; null when none is left. */
export function retryDelayMs(attempt: number, scale: number, random: () => number = Math.random): number | null {
  if (attempt >= MAX_DELIVERY_ATTEMPTS) return null;
  const base = RETRY_SCHEDULE_MS[Math.max(0, attempt - 1)] * scale;
  return Math.round(base * (0.8 + 0.4 * random()));
}
