import { Injectable } from '@nestjs/common';
import { DataSource } from 'typeorm';
import { rowsOf } from '../database/transactions.js';

export type DueState = 'ready' | 'waiting_for_capacity';

export interface DueCount {
  provider: string;
  state: DueState;
  jobs: number;
}

export interface Backlog {
  due: DueCount[];
  /** Seconds since the oldest due job of each state became due; absent when none is due. */
  oldestAgeSeconds: Partial<Record<DueState, number>>;
}

/**
 * What is due now, at a bounded cost: each count reads at most `cap` entries of its partial index (IDX_jobs_due for
 * jobs free to run, IDX_jobs_waiting for jobs waiting on a provider's capacity), and each oldest age is the first
 * entry of an index: one for the free jobs, one per provider seen waiting.
 */
@Injectable()
export class BacklogRepository {
  constructor(private readonly dataSource: DataSource) {}

  async read(cap: number): Promise<Backlog> {
    const due = await rowsOf<DueCount>(
      this.dataSource.manager,
      `WITH ready AS (
         SELECT providers[1] AS provider FROM jobs
          WHERE next_attempt_at IS NOT NULL AND waiting_for IS NULL AND next_attempt_at <= now()
            AND status IN ('pending', 'running', 'unknown')
          LIMIT $1),
       waiting AS (
         SELECT waiting_for AS provider FROM jobs
          WHERE next_attempt_at IS NOT NULL AND waiting_for IS NOT NULL AND next_attempt_at <= now()
            AND status IN ('pending', 'running', 'unknown')
          LIMIT $1)
       SELECT provider, 'ready' AS state, count(*)::int AS jobs FROM ready GROUP BY provider
       UNION ALL
       SELECT provider, 'waiting_for_capacity' AS state, count(*)::int AS jobs FROM waiting GROUP BY provider`,
      [cap],
    );
    const waitingOn = due.filter((d) => d.state === 'waiting_for_capacity').map((d) => d.provider);
    const [ages] = await rowsOf<{ ready: number | null; waiting: number | null }>(
      this.dataSource.manager,
      `SELECT (SELECT extract(epoch FROM now() - min(next_attempt_at))::float8 FROM jobs
                WHERE next_attempt_at IS NOT NULL AND waiting_for IS NULL AND next_attempt_at <= now()
                  AND status IN ('pending', 'running', 'unknown')) AS ready,
              (SELECT max(age) FROM unnest($1::text[]) AS p(provider), LATERAL (
                 SELECT extract(epoch FROM now() - min(next_attempt_at))::float8 AS age FROM jobs
                  WHERE waiting_for = p.provider AND next_attempt_at IS NOT NULL AND next_attempt_at <= now()
                    AND status IN ('pending', 'running', 'unknown')) w) AS waiting`,
      [waitingOn],
    );
    const oldestAgeSeconds: Backlog['oldestAgeSeconds'] = {};
    if (ages.ready !== null) oldestAgeSeconds.ready = ages.ready;
    if (ages.waiting !== null) oldestAgeSeconds.waiting_for_capacity = ages.waiting;
    return { due, oldestAgeSeconds };
  }
}
