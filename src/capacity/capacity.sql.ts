import { prepared, statement } from '../database/prepared-statements.js';

/** provider_state's and provider_leases' statements (docs/sql/capacity.sql). */

export const STATE_COLUMNS = `s.provider, s.paused_until, s.breaker_state, s.breaker_since, s.breaker_until,
  s.probe_attempt_id,
  s.failures::text AS failures, s.request_bucket, s.token_bucket, s.refilled_at, s.window_start, s.requests_in_window,
  s.tokens_in_window, now() AS now,
  (SELECT count(*) FROM provider_leases l WHERE l.provider = s.provider AND l.expires_at > now()) AS in_flight`;

/** Every provider's state, read before each claim: named (database/prepared-statements.ts). */
export const SNAPSHOT = prepared('provider_states', `SELECT ${STATE_COLUMNS} FROM provider_state s`);

/** These providers' rows locked in name order: the only lock order on them, always taken after any job lock. */
export const LOCK_STATES = statement<[string[]], { provider: string }>(
  'lock_provider_states',
  `SELECT provider FROM provider_state WHERE provider = ANY($1::text[]) ORDER BY provider FOR UPDATE`,
);

/** A provider's first use: its row is made once, then locked like the others. */
export const CREATE_STATES = statement<[string[]]>(
  'create_provider_states',
  `INSERT INTO provider_state (provider) SELECT unnest($1::text[]) ORDER BY 1 ON CONFLICT DO NOTHING`,
);

/**
 * These providers' states, read in a statement of its own after LOCK_STATES: its snapshot then sees the leases that
 * the previous holder of the lock committed while this transaction waited (a subquery in the locking statement would
 * not).
 */
export const STATES_OF = statement<[string[]]>(
  'provider_states_of',
  `SELECT ${STATE_COLUMNS} FROM provider_state s WHERE s.provider = ANY($1::text[])`,
);

/**
 * A claim's grant in one statement, under the provider's row lock: its new state ($2-$13), the leases of the calls
 * it admitted ($14 attempt ids, $15 their time to live in ms), and its expired leases gone.
 */
export const COMMIT_GRANT = statement(
  'commit_provider_grant',
  `WITH expired AS (
         DELETE FROM provider_leases WHERE provider = $1 AND expires_at <= now() AND cardinality($14::uuid[]) > 0
       ), taken AS (
         INSERT INTO provider_leases (attempt_id, provider, expires_at)
         SELECT a, $1, now() + make_interval(secs => t / 1000) FROM unnest($14::uuid[], $15::float8[]) AS x(a, t)
       )
       UPDATE provider_state SET paused_until = $2, breaker_state = $3, breaker_since = $4, breaker_until = $5,
              probe_attempt_id = $6, failures = $7::timestamptz[], request_bucket = $8, token_bucket = $9,
                refilled_at = $10,
              window_start = $11, requests_in_window = $12, tokens_in_window = $13, updated_at = now()
        WHERE provider = $1`,
);

export const RELEASE_LEASES = statement<[string[]]>(
  'release_provider_leases',
  `DELETE FROM provider_leases WHERE attempt_id = ANY($1::uuid[])`,
);

export const RELEASE_LEASE = statement<[string]>(
  'release_provider_lease',
  `DELETE FROM provider_leases WHERE attempt_id = $1`,
);

/** Finished calls' leases handed to new attempts ($1 from, $2 to, $3 ms to live); an expired lease is not moved. */
export const HAND_OVER_LEASES = statement<[string[], string[], number[]], { attempt_id: string }>(
  'hand_over_provider_leases',
  `UPDATE provider_leases l SET attempt_id = x.to_id, expires_at = now() + make_interval(secs => x.ttl / 1000)
         FROM unnest($1::uuid[], $2::uuid[], $3::float8[]) AS x(from_id, to_id, ttl)
        WHERE l.attempt_id = x.from_id AND l.expires_at > now()
        RETURNING l.attempt_id`,
);

/** A rate-limit answer: no call to the provider starts, from any replica, before now + $2 ms (never shortened). */
export const PAUSE_PROVIDER = statement<[string, number], { paused_until: Date; now: Date }>(
  'pause_provider',
  `INSERT INTO provider_state AS s (provider, paused_until) VALUES ($1,
        now() + make_interval(secs => $2::float8 / 1000))
       ON CONFLICT (provider) DO UPDATE SET paused_until = greatest(s.paused_until, EXCLUDED.paused_until),
         updated_at = now()
       RETURNING paused_until, now() AS now`,
);

/** The providers paused now, with how long each stays paused (ms, on the database's clock). */
export const PAUSES = statement<[], { provider: string; ms: number }>(
  'provider_pauses',
  `SELECT provider, (extract(epoch FROM paused_until - now()) * 1000)::float8 AS ms FROM provider_state
        WHERE paused_until > now()`,
);

/**
 * Jobs deferred to the end of these providers' pause or cooldown are due now: the one statement outside
 * src/ledger/ that writes jobs (docs/design.md §9). Only a deferral leaves a job waiting on a provider with a future
 * next_attempt_at (a wait for capacity keeps the due time it had, and any other schedule ends the wait), so no job's
 * own backoff is cut short; no status, no version, no event changes.
 */
export const WAKE_DEFERRED = statement<[string[]], { id: string }>(
  'wake_deferred_jobs',
  `UPDATE jobs SET next_attempt_at = now()
        WHERE waiting_for = ANY($1::text[]) AND next_attempt_at > now() AND status IN ('pending', 'running', 'unknown')
        RETURNING id`,
);

/** Calls in flight per provider, across replicas: attempts claimed and not ended (the live-attempt index). */
export const IN_FLIGHT_BY_PROVIDER = statement<[], { provider: string; n: string }>(
  'in_flight_by_provider',
  `SELECT provider, count(*) AS n FROM attempts
        WHERE status IN ('starting', 'running', 'unknown') AND (status = 'running' OR (status = 'starting'
          AND claimed_at IS NOT NULL))
        GROUP BY provider`,
);
