import { Injectable } from '@nestjs/common';
import { DataSource } from 'typeorm';

import { on, type Queryable, rowsOf, run } from '../database/transactions.js';
import type { ProviderState } from './capacity.rules.js';
import {
  COMMIT_GRANT,
  CREATE_STATES,
  HAND_OVER_LEASES,
  IN_FLIGHT_BY_PROVIDER,
  LOCK_STATES,
  PAUSE_PROVIDER,
  PAUSES,
  RELEASE_LEASE,
  RELEASE_LEASES,
  SNAPSHOT,
  STATES_OF,
  WAKE_DEFERRED,
} from './capacity.sql.js';

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
    if ((await rowsOf(manager, LOCK_STATES, [names])).length < names.length) {
      await run(manager, CREATE_STATES, [names]);
      await run(manager, LOCK_STATES, [names]);
    }
    const rows = await rowsOf<ProviderStateRow>(manager, STATES_OF, [names]);
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
    await run(manager, COMMIT_GRANT, [
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
    ]);
  }

  async releaseAll(attemptIds: string[]): Promise<void> {
    await run(this.dataSource.manager, RELEASE_LEASES, [attemptIds]);
  }

  /**
   * Hands finished calls' leases to new attempts, each with a fresh expiry. Returns how many moved: fewer than
   * asked means a lease had expired and gone, and the caller must not start that call on it.
   */
  async handOver(moves: Array<{ from: string; to: string; ttlMs: number }>, manager: Queryable): Promise<number> {
    if (!moves.length) return 0;
    const rows = await rowsOf(manager, HAND_OVER_LEASES, [
      moves.map((m) => m.from),
      moves.map((m) => m.to),
      moves.map((m) => m.ttlMs),
    ]);
    return rows.length;
  }

  async release(attemptId: string): Promise<void> {
    await run(this.dataSource.manager, RELEASE_LEASE, [attemptId]);
  }

  /** A rate-limit answer: no call to the provider starts, from any replica, before now + `ms`. */
  async pause(provider: string, ms: number): Promise<{ until: Date; now: Date }> {
    const rows = await rowsOf(this.dataSource.manager, PAUSE_PROVIDER, [provider, ms]);
    return { until: rows[0].paused_until, now: rows[0].now };
  }

  /** The providers paused now, with how long each stays paused (ms, on the database's clock). */
  async pauses(manager?: Queryable): Promise<Map<string, number>> {
    const rows = await rowsOf(on(this.dataSource, manager), PAUSES, []);
    return new Map(rows.map((r) => [r.provider, r.ms]));
  }

  /**
   * Jobs deferred to the end of these providers' pause or cooldown (waiting on one of them, due later) are due now.
   * Only a deferral leaves a job waiting on a provider with a future next_attempt_at (a wait for capacity keeps the
   * due time it had, and any other schedule ends the wait), so no job's own backoff is cut short. Bookkeeping on
   * jobs, like a lease's, written here because it belongs to the provider's state changing.
   */
  async wakeDeferred(providers: string[]): Promise<number> {
    const rows = await rowsOf(this.dataSource.manager, WAKE_DEFERRED, [providers]);
    return rows.length;
  }

  /**
   * Calls in flight per provider, across replicas: attempts claimed and not ended (read through the live-attempt
   * index).
   */
  async inFlightByProvider(): Promise<Map<string, number>> {
    const rows = await rowsOf(this.dataSource.manager, IN_FLIGHT_BY_PROVIDER, []);
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
