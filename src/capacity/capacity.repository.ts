import { Injectable } from '@nestjs/common';
import { DataSource } from 'typeorm';

import { on, type Queryable, rowsOf } from '../database/transactions.js';
import type { ProviderState } from './capacity.rules.js';
import { SNAPSHOT, STATE_COLUMNS } from './capacity.sql.js';

interface ProviderStateRow {
  provider: string;
  paused_until: Date | null;
  breaker_state: ProviderState['breaker'];
  breaker_since: Date | null;
  breaker_until: Date | null;
  probe_attempt_id: string | null;
  failures: Date[] | string;
  request_bucket: number | null;
  token_bucket: number | null;
  refilled_at: Date | null;
  window_start: Date | null;
  requests_in_window: number;
  tokens_in_window: string | number;
  in_flight: string | number;
  now: Date;
}

/** node-postgres parses timestamptz[] only when it knows the type; read it as text and parse here. */
function parseTimestamps(value: Date[] | string): Date[] {
  if (Array.isArray(value)) return value.map((v) => new Date(v));
  const inner = value.replace(/^\{|\}$/g, '');
  return inner ? inner.split(',').map((v) => new Date(v.replace(/^"|"$/g, ''))) : [];
}

function stateFromRow(row: ProviderStateRow): ProviderState {
  return {
    provider: row.provider,
    pausedUntil: row.paused_until,
    breaker: row.breaker_state,
    breakerSince: row.breaker_since,
    breakerUntil: row.breaker_until,
    probeAttemptId: row.probe_attempt_id,
    failures: parseTimestamps(row.failures),
    requestBucket: row.request_bucket,
    tokenBucket: row.token_bucket,
    refilledAt: row.refilled_at,
    windowStart: row.window_start,
    requestsInWindow: row.requests_in_window,
    tokensInWindow: Number(row.tokens_in_window),
    inFlight: Number(row.in_flight),
    now: row.now,
  };
}

export interface Lease {
  attemptId: string;
  ttlMs: number;
}

/** provider_state and provider_leases (docs/design.md#capacity): the only SQL over them. */
@Injectable()
export class CapacityRepository {
  constructor(private readonly dataSource: DataSource) {}

  /** Every provider's state, unlocked: what the planner and the claim filter read at the start of a claim. */
  async snapshot(manager?: Queryable): Promise<ProviderState[]> {
    const rows = await rowsOf<ProviderStateRow>(on(this.dataSource, manager), SNAPSHOT);
    return rows.map(stateFromRow);
  }

  /**
   * The states of these providers, created when missing and locked in name order (the only lock order on them,
   * always taken after any job lock), with their live leases counted under the lock.
   */
  async lock(providers: string[], manager: Queryable): Promise<ProviderState[]> {
    const names = [...new Set(providers)].sort();
    const lockSql = `SELECT provider FROM provider_state WHERE provider = ANY($1::text[]) ORDER BY provider FOR UPDATE`;
    if ((await rowsOf(manager, lockSql, [names])).length < names.length) {
      // First use of a provider: its row is made once, then locked like the others.
      await manager.query(
        `INSERT INTO provider_state (provider) SELECT unnest($1::text[]) ORDER BY 1 ON CONFLICT DO NOTHING`,
        [names],
      );
      await manager.query(lockSql, [names]);
    }
    // Read in a statement of its own, after the lock: its snapshot then sees the leases that the previous holder
    // of the lock committed while this transaction waited (a subquery in the locking statement would not).
    const rows = await rowsOf<ProviderStateRow>(
      manager,
      `SELECT ${STATE_COLUMNS} FROM provider_state s WHERE s.provider = ANY($1::text[])`,
      [names],
    );
    return rows.map(stateFromRow);
  }

  async save(state: ProviderState, manager: Queryable): Promise<void> {
    await this.commitGrant(state, [], manager);
  }

  /**
   * One statement for a claim's grant: the provider's new state, the leases of the calls it admitted, and the
   * provider's expired leases gone. Under the provider's row lock (lock), like every change to its capacity.
   */
  async commitGrant(state: ProviderState, leases: Lease[], manager: Queryable): Promise<void> {
    await manager.query(
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
      [
        state.provider,
        state.pausedUntil,
        state.breaker,
        state.breakerSince,
        state.breakerUntil,
        state.probeAttemptId,
        state.failures.map((d) => d.toISOString()),
        state.requestBucket,
        state.tokenBucket,
        state.refilledAt,
        state.windowStart,
        state.requestsInWindow,
        state.tokensInWindow,
        leases.map((l) => l.attemptId),
        leases.map((l) => l.ttlMs),
      ],
    );
  }

  async releaseAll(attemptIds: string[]): Promise<void> {
    await this.dataSource.query(`DELETE FROM provider_leases WHERE attempt_id = ANY($1::uuid[])`, [attemptIds]);
  }

  /**
   * Hands finished calls' leases to new attempts, each with a fresh expiry. Returns how many moved: fewer than
   * asked means a lease had expired and gone, and the caller must not start that call on it.
   */
  async handOver(moves: Array<{ from: string; to: string; ttlMs: number }>, manager: Queryable): Promise<number> {
    if (!moves.length) return 0;
    const rows = await rowsOf<{ attempt_id: string }>(
      manager,
      `UPDATE provider_leases l SET attempt_id = x.to_id, expires_at = now() + make_interval(secs => x.ttl / 1000)
         FROM unnest($1::uuid[], $2::uuid[], $3::float8[]) AS x(from_id, to_id, ttl)
        WHERE l.attempt_id = x.from_id AND l.expires_at > now()
        RETURNING l.attempt_id`,
      [moves.map((m) => m.from), moves.map((m) => m.to), moves.map((m) => m.ttlMs)],
    );
    return rows.length;
  }

  async release(attemptId: string): Promise<void> {
    await this.dataSource.query(`DELETE FROM provider_leases WHERE attempt_id = $1`, [attemptId]);
  }

  /** A rate-limit answer: no call to the provider starts, from any replica, before now + `ms`. */
  async pause(provider: string, ms: number): Promise<{ until: Date; now: Date }> {
    const rows = await rowsOf<{ paused_until: Date; now: Date }>(
      this.dataSource.manager,
      `INSERT INTO provider_state AS s (provider, paused_until) VALUES ($1,
        now() + make_interval(secs => $2::float8 / 1000))
       ON CONFLICT (provider) DO UPDATE SET paused_until = greatest(s.paused_until, EXCLUDED.paused_until),
         updated_at = now()
       RETURNING paused_until, now() AS now`,
      [provider, ms],
    );
    return { until: rows[0].paused_until, now: rows[0].now };
  }

  /** The providers paused now, with how long each stays paused (ms, on the database's clock). */
  async pauses(manager?: Queryable): Promise<Map<string, number>> {
    const rows = await rowsOf<{ provider: string; ms: number }>(
      on(this.dataSource, manager),
      `SELECT provider, (extract(epoch FROM paused_until - now()) * 1000)::float8 AS ms FROM provider_state
        WHERE paused_until > now()`,
    );
    return new Map(rows.map((r) => [r.provider, r.ms]));
  }

  /**
   * Jobs deferred to the end of these providers' pause or cooldown (waiting on one of them, due later) are due now.
   * Only a deferral leaves a job waiting on a provider with a future next_attempt_at (a wait for capacity keeps the
   * due time it had, and any other schedule ends the wait), so no job's own backoff is cut short. Bookkeeping on
   * jobs, like a lease's, written here because it belongs to the provider's state changing.
   */
  async wakeDeferred(providers: string[]): Promise<number> {
    const rows = await rowsOf<{ id: string }>(
      this.dataSource.manager,
      `UPDATE jobs SET next_attempt_at = now()
        WHERE waiting_for = ANY($1::text[]) AND next_attempt_at > now() AND status IN ('pending', 'running', 'unknown')
        RETURNING id`,
      [providers],
    );
    return rows.length;
  }

  /**
   * Calls in flight per provider, across replicas: attempts claimed and not ended (read through the live-attempt
   * index).
   */
  async inFlightByProvider(): Promise<Map<string, number>> {
    const rows = await rowsOf<{ provider: string; n: string }>(
      this.dataSource.manager,
      `SELECT provider, count(*) AS n FROM attempts
        WHERE status IN ('starting', 'running', 'unknown') AND (status = 'running' OR (status = 'starting'
          AND claimed_at IS NOT NULL))
        GROUP BY provider`,
    );
    return new Map(rows.map((r) => [r.provider, Number(r.n)]));
  }

  /** A short transaction over one provider's locked state (breaker bookkeeping). */
  async withLocked<T>(provider: string, work: (state: ProviderState, manager: Queryable) => Promise<T>): Promise<T> {
    return this.dataSource.transaction(async (manager) => {
      const [state] = await this.lock([provider], manager);
      return work(state, manager);
    });
  }
}
