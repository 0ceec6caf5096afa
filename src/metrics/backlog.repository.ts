import { Injectable } from '@nestjs/common';
import { DataSource } from 'typeorm';

import { rowsOf } from '../database/transactions.js';

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
    const ready = await rowsOf<{ provider: string; jobs: number }>(
      this.dataSource.manager,
      `SELECT provider, count(*)::int AS jobs FROM (
         SELECT providers[1] AS provider FROM jobs
          WHERE next_attempt_at IS NOT NULL AND waiting_for IS NULL AND next_attempt_at <= now()
          ORDER BY next_attempt_at LIMIT $1) due
        GROUP BY provider`,
      [cap],
    );
    const [readyAge] = await rowsOf<{ age: number | null }>(
      this.dataSource.manager,
      `SELECT extract(epoch FROM now() - min(next_attempt_at))::float8 AS age FROM jobs
        WHERE next_attempt_at IS NOT NULL AND waiting_for IS NULL AND next_attempt_at <= now()`,
    );
    const waiting = await rowsOf<{ provider: string; jobs: number; age: number }>(
      this.dataSource.manager,
      `WITH RECURSIVE waited_on AS (
         SELECT min(waiting_for) AS provider FROM jobs WHERE waiting_for IS NOT NULL AND next_attempt_at IS NOT NULL
         UNION ALL
         SELECT (SELECT min(waiting_for) FROM jobs WHERE waiting_for > w.provider AND next_attempt_at IS NOT NULL)
           FROM waited_on w WHERE w.provider IS NOT NULL)
       SELECT w.provider, d.jobs, a.age FROM waited_on w,
         LATERAL (SELECT count(*)::int AS jobs FROM (
           SELECT 1 FROM jobs
            WHERE waiting_for = w.provider AND next_attempt_at IS NOT NULL AND next_attempt_at <= now()
            ORDER BY next_attempt_at LIMIT $1) x) d,
         LATERAL (SELECT extract(epoch FROM now() - min(next_attempt_at))::float8 AS age FROM jobs
            WHERE waiting_for = w.provider AND next_attempt_at IS NOT NULL AND next_attempt_at <= now()) a
       WHERE w.provider IS NOT NULL AND d.jobs > 0`,
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
   * The `top` owners by jobs queued (pending), with their jobs running: one pass over the live jobs by
   * IDX_jobs_owner_status_created, so it grows with the backlog (about 30 ms for 100,000 live jobs), every 10 s.
   */
  ownerLoads(top: number): Promise<OwnerLoad[]> {
    return rowsOf<OwnerLoad>(
      this.dataSource.manager,
      `SELECT owner_id AS owner, count(*) FILTER (WHERE status = 'pending')::int AS "queued",
              count(*) FILTER (WHERE status = 'running')::int AS "inFlight"
         FROM jobs WHERE status IN ('pending', 'running') GROUP BY owner_id
        ORDER BY 2 DESC, 3 DESC, owner_id LIMIT $1`,
      [top],
    );
  }
}
