import { Injectable } from '@nestjs/common';
import { DataSource } from 'typeorm';

import { rowsOf } from '../database/transactions.js';
import { READY_AGE, READY_BY_PROVIDER, TOP_OWNERS, WAITING_BY_PROVIDER } from './backlog.sql.js';

export type DueState = 'ready' | 'waiting_for_capacity';

export interface DueCount {
  provider: string;
  state: DueState;
  jobs: number;
}

export interface OwnerLoad {
  owner: string;
  queued: number;
  inFlight: number;
}

export interface Backlog {
  due: DueCount[];
  /** Seconds since the oldest due job of each state became due; absent when none is due. */
  oldestAgeSeconds: Partial<Record<DueState, number>>;
}

/**
 * What is due now, at a bounded cost. Jobs free to run: a walk of IDX_jobs_due in order that stops after `cap` due
 * jobs (the ORDER BY keeps the planner on that walk, not on a bitmap scan of every due entry), and its first entry
 * for the age. Jobs waiting for capacity: the providers they wait on are found by a
 * skip scan of IDX_jobs_waiting (one probe per provider), then per provider a range of that index stopped after
 * `cap`, and its first entry. So a read costs at most `cap` rows, plus `cap` per provider waited on.
 */
// No status filter: every move out of "due" (the running mark, a settlement, a cancel) clears next_attempt_at, and
// without one the waiting side is read from IDX_jobs_waiting alone (an index-only scan).
@Injectable()
export class BacklogRepository {
  constructor(private readonly dataSource: DataSource) {}

  async read(cap: number): Promise<Backlog> {
    const ready = await rowsOf<{ provider: string; jobs: number }>(this.dataSource.manager, READY_BY_PROVIDER, [cap]);
    const [readyAge] = await rowsOf<{ age: number | null }>(this.dataSource.manager, READY_AGE);
    const waiting = await rowsOf<{ provider: string; jobs: number; age: number }>(
      this.dataSource.manager,
      WAITING_BY_PROVIDER,
      [cap],
    );
    const due: DueCount[] = [
      ...ready.map((r) => ({ provider: r.provider, state: 'ready' as const, jobs: r.jobs })),
      ...waiting.map((w) => ({ provider: w.provider, state: 'waiting_for_capacity' as const, jobs: w.jobs })),
    ];
    const oldestAgeSeconds: Backlog['oldestAgeSeconds'] = {};
    if (readyAge.age !== null) oldestAgeSeconds.ready = readyAge.age;
    if (waiting.length) oldestAgeSeconds.waiting_for_capacity = Math.max(...waiting.map((w) => w.age));
    return { due, oldestAgeSeconds };
  }

  /**
   * The `top` owners by jobs queued (pending), with their calls in flight (CALL_IN_FLIGHT, as maxConcurrency counts
   * them): one pass over the pending jobs by IDX_jobs_owner_status_created, so it grows with the backlog (about 30 ms
   * for 100,000 live jobs), and one over the calls open now (IDX_attempts_in_flight), every 10 s.
   */
  ownerLoads(top: number): Promise<OwnerLoad[]> {
    return rowsOf<OwnerLoad>(this.dataSource.manager, TOP_OWNERS, [top]);
  }
}
