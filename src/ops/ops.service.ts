import { Injectable } from '@nestjs/common';

import type { Principal } from '../auth/scopes.js';
import { NotFoundError, ValidationFailedError } from '../common/domain.errors.js';
import { badCursor, decodeCursor, pageOf } from '../common/keyset-page.js';
import { toJobSummaryView, toJobView } from '../jobs/job.view.js';
import type { JobStatus } from '../ledger/job.types.js';
import { type AttemptQueueQuery, type JobEventRow, OpsRepository } from './ops.repository.js';
import type { JobEventPageView, JobEventView, OpsJobPageView, OpsJobView, OpsStatsView, WaitingAttemptPageView } from './ops.view.js';

const EVENT_ID = /^[1-9]\d{0,18}$/;

type WaitingAttemptsQuery = Pick<AttemptQueueQuery, 'status' | 'provider' | 'limit'> & { olderThan?: number; cursor?: string };

const iso = (date: Date) => new Date(date).toISOString();
const round = (value: number | null) => (value === null ? null : Math.round(value * 10) / 10);

function toEventView(row: JobEventRow): JobEventView {
  return {
    id: row.id,
    at: iso(row.at),
    subject: row.subject,
    attemptId: row.attempt_id,
    from: row.from_status,
    to: row.to_status,
    reason: row.reason,
    detail: row.detail ?? null,
    actor: row.actor_key_id ? { keyId: row.actor_key_id, owner: row.actor_owner ?? '' } : null,
  };
}

/** Reads for operators (`ops:read`, any owner) and the job timeline (its owner, or an operator). */
@Injectable()
export class OpsService {
  constructor(private readonly ops: OpsRepository) {}

  /** The owner with `jobs:read` sees its own job's events; `ops:read` sees any job's. Another owner's job: 404 (I7). */
  async listEvents(principal: Principal, jobId: string, query: { limit: number; cursor?: string }): Promise<JobEventPageView> {
    const owner = await this.ops.findJobOwner(jobId);
    const own = owner === principal.ownerId && principal.scopes.includes('jobs:read');
    const visible = owner !== undefined && (own || principal.scopes.includes('ops:read'));
    if (!visible) throw new NotFoundError('Job');
    const rows = await this.ops.listEvents(jobId, query.limit + 1, decodeCursor(query.cursor, EVENT_ID) ?? '0');
    const { page, nextCursor } = pageOf(rows, query.limit);
    return { items: page.map(toEventView), nextCursor };
  }

  async listWaitingAttempts(query: WaitingAttemptsQuery): Promise<WaitingAttemptPageView> {
    const rows = await this.ops.listWaitingAttempts({
      status: query.status,
      provider: query.provider,
      olderThanSeconds: query.olderThan,
      limit: query.limit + 1,
      afterId: decodeCursor(query.cursor),
    });
    if (!rows) throw badCursor();
    const { page, nextCursor } = pageOf(rows, query.limit);
    return {
      items: page.map((row) => ({
        attemptId: row.id,
        jobId: row.job_id,
        owner: row.owner_id,
        operation: row.operation,
        provider: row.provider,
        number: row.number,
        status: row.status,
        startedAt: iso(row.started_at),
        deadlineAt: iso(row.deadline_at),
        waitingSince: iso(row.waiting_since),
        waitedSeconds: Math.floor(row.waited_seconds),
        providerRequestId: row.provider_request_id,
        error: row.error ?? null,
      })),
      nextCursor,
    };
  }

  async findJob(id: string): Promise<OpsJobView> {
    const job = await this.ops.findJob(id);
    if (!job) throw new NotFoundError('Job');
    return { ...toJobView(job), owner: job.ownerId };
  }

  async listJobs(query: { status?: JobStatus; owner?: string; idempotencyKey?: string; limit: number; cursor?: string }): Promise<OpsJobPageView> {
    if (query.idempotencyKey !== undefined && query.owner === undefined) {
      throw new ValidationFailedError([{ field: 'owner', message: 'is needed with idempotencyKey (a key is unique per owner only)' }]);
    }
    const jobs = await this.ops.listJobs({
      ownerId: query.owner,
      status: query.status,
      idempotencyKey: query.idempotencyKey,
      limit: query.limit + 1,
      afterId: decodeCursor(query.cursor),
    });
    if (!jobs) throw badCursor();
    const { page, nextCursor } = pageOf(jobs, query.limit);
    return { items: page.map((job) => ({ ...toJobSummaryView(job), owner: job.ownerId })), nextCursor };
  }

  async stats(minutes: number): Promise<OpsStatsView> {
    const [perMinute, providers] = await Promise.all([this.ops.perMinute(minutes), this.ops.providerHealth(minutes)]);
    return {
      minutes,
      perMinute: perMinute.map((m) => ({
        at: iso(m.at),
        created: m.created,
        succeeded: m.succeeded,
        failed: m.failed,
        cancelled: m.cancelled,
        attempts: m.attempts,
        latencyP50Ms: round(m.p50_ms),
        latencyP95Ms: round(m.p95_ms),
      })),
      providers: providers.map((p) => ({
        provider: p.provider,
        attempts: p.attempts,
        succeeded: p.succeeded,
        failed: p.failed,
        timeouts: p.timeouts,
        unknownNow: p.unknown_now,
        cancelled: p.cancelled,
        discarded: p.discarded,
        latencyP95Ms: round(p.p95_ms),
      })),
    };
  }
}
