import { Injectable } from '@nestjs/common';
import { DataSource } from 'typeorm';

import { rowsOf } from '../database/transactions.js';
import {
  type JobRow,
  type JobStatus,
  type JobWithAttempts,
  jobWithAttemptsFromRow,
  type ListedJob,
  listedJobFromRow,
} from '../ledger/job.types.js';
import {
  JOB_TIMELINE_STATE,
  type JobEventRow,
  JOBS_PER_MINUTE,
  LATEST_EVENT_IDS,
  LIST_JOB_EVENTS_AFTER,
  LIST_OPS_JOBS,
  LIST_WAITING_ATTEMPTS,
  type MinuteRow,
  OPS_ATTEMPT_CURSOR,
  OPS_JOB_CURSOR,
  OPS_JOB_OWNER,
  OPS_JOB_WITH_ATTEMPTS,
  PROVIDER_HEALTH,
  type ProviderHealthRow,
  type TimelineStateRow,
  type WaitingAttemptRow,
} from './ops.sql.js';

export type { JobEventRow, MinuteRow, ProviderHealthRow, TimelineStateRow, WaitingAttemptRow } from './ops.sql.js';

export interface AttemptQueueQuery {
  status: 'unknown' | 'running' | 'starting';
  provider?: string;
  olderThanSeconds?: number;
  limit: number;
  /** The id of the last attempt of the previous page. */
  afterId?: string;
}

export interface OpsJobQuery {
  ownerId?: string;
  status?: JobStatus;
  idempotencyKey?: string;
  limit: number;
  afterId?: string;
}

/**
 * The operators' reads, across owners (I7's one exception, by scope: docs/design.md#operators). Read-only: every
 * write an operator makes goes through the Ledger like anyone else's. Their SQL is ops.sql.ts's.
 */
@Injectable()
export class OpsRepository {
  constructor(private readonly dataSource: DataSource) {}

  /** Any owner's job with its attempts. */
  async findJob(id: string): Promise<JobWithAttempts | undefined> {
    const rows = await rowsOf(this.dataSource.manager, OPS_JOB_WITH_ATTEMPTS, [id]);
    return rows[0] && jobWithAttemptsFromRow(rows[0]);
  }

  /** The job's owner, or undefined when there is no such job. */
  async findJobOwner(id: string): Promise<string | undefined> {
    const rows = await rowsOf(this.dataSource.manager, OPS_JOB_OWNER, [id]);
    return rows[0]?.owner_id;
  }

  /** Newest first, keyset on (created_at, id). Undefined when the cursor names no job. */
  async listJobs(query: OpsJobQuery): Promise<ListedJob[] | undefined> {
    const params: unknown[] = [query.limit];
    if (query.ownerId !== undefined) params.push(query.ownerId);
    if (query.status !== undefined) params.push(query.status);
    if (query.idempotencyKey !== undefined) params.push(query.idempotencyKey);
    if (query.afterId !== undefined) {
      if (!(await rowsOf(this.dataSource.manager, OPS_JOB_CURSOR, [query.afterId])).length) return undefined;
      params.push(query.afterId);
    }
    const sql = LIST_OPS_JOBS.build(
      query.ownerId !== undefined,
      query.status !== undefined,
      query.idempotencyKey !== undefined,
      query.afterId !== undefined,
    );
    const rows = await rowsOf<JobRow>(this.dataSource.manager, sql, params);
    return rows.map(listedJobFromRow);
  }

  /** The job's owner and end, with the database's clock (a stream's grace is timed by it). */
  async findTimelineState(id: string): Promise<TimelineStateRow | undefined> {
    const rows = await rowsOf(this.dataSource.manager, JOB_TIMELINE_STATE, [id]);
    return rows[0];
  }

  /** The latest event id of each of these jobs (IDX_job_events_job): the streams' sweep, one query for all. */
  async latestEventIds(jobIds: string[]): Promise<Map<string, string>> {
    const rows = await rowsOf(this.dataSource.manager, LATEST_EVENT_IDS, [jobIds]);
    return new Map(rows.map((row) => [row.job_id, row.id]));
  }

  /** The job's events in the order they happened, after the event `afterId` (exclusive). */
  listEvents(jobId: string, limit: number, afterId: string): Promise<JobEventRow[]> {
    return rowsOf(this.dataSource.manager, LIST_JOB_EVENTS_AFTER, [jobId, afterId, limit]);
  }

  /**
   * Live attempts of every owner, oldest deadline first (IDX_attempts_live_deadline), keyset on (deadline_at, id).
   * Undefined when the cursor names no attempt.
   */
  async listWaitingAttempts(query: AttemptQueueQuery): Promise<WaitingAttemptRow[] | undefined> {
    const params: unknown[] = [query.status, query.limit];
    if (query.provider !== undefined) params.push(query.provider);
    if (query.olderThanSeconds !== undefined) params.push(query.olderThanSeconds);
    if (query.afterId !== undefined) {
      if (!(await rowsOf(this.dataSource.manager, OPS_ATTEMPT_CURSOR, [query.afterId])).length) return undefined;
      params.push(query.afterId);
    }
    const sql = LIST_WAITING_ATTEMPTS.build(
      query.provider !== undefined,
      query.olderThanSeconds !== undefined,
      query.afterId !== undefined,
    );
    return rowsOf<WaitingAttemptRow>(this.dataSource.manager, sql, params);
  }

  /**
   * Per minute over the last `minutes`: jobs created and settled, attempts answered and their latency
   * (JOBS_PER_MINUTE says which indexes bound it).
   */
  perMinute(minutes: number): Promise<MinuteRow[]> {
    return rowsOf(this.dataSource.manager, JOBS_PER_MINUTE, [minutes]);
  }

  /** Each provider's attempts started in the last `minutes`, by what became of them. */
  providerHealth(minutes: number): Promise<ProviderHealthRow[]> {
    return rowsOf(this.dataSource.manager, PROVIDER_HEALTH, [minutes]);
  }
}
