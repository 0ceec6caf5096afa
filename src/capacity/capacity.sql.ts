import { prepared } from '../database/prepared-statements.js';

/** provider_state's statements (docs/sql/capacity.sql). */

export const STATE_COLUMNS = `s.provider, s.paused_until, s.breaker_state, s.breaker_since, s.breaker_until,
  s.probe_attempt_id,
  s.failures::text AS failures, s.request_bucket, s.token_bucket, s.refilled_at, s.window_start, s.requests_in_window,
  s.tokens_in_window, now() AS now,
  (SELECT count(*) FROM provider_leases l WHERE l.provider = s.provider AND l.expires_at > now()) AS in_flight`;

/** Every provider's state, read before each claim: named (database/prepared-statements.ts). */
export const SNAPSHOT = prepared('provider_states', `SELECT ${STATE_COLUMNS} FROM provider_state s`);
