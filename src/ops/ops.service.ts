import { Inject, Injectable } from '@nestjs/common';

import { CredentialWatch } from '../auth/credential-watch.js';
import type { Principal } from '../auth/scopes.js';
import { type StreamTokenView, toStreamTokenView } from '../auth/stream-token.view.js';
import { StreamTokensService } from '../auth/stream-tokens.service.js';
import { NotFoundError, ValidationFailedError } from '../common/domain.errors.js';
import { isEventId } from '../common/event-ids.js';
import { badCursor, decodeCursor, pageOf } from '../common/keyset-page.js';
import { type AppConfig, appConfig } from '../config/app.config.js';
import { toJobSummaryView, toJobView } from '../jobs/job.view.js';
import type { JobStatus } from '../ledger/job.types.js';
import type { LiveStream } from '../streams/live-stream.js';
import { LiveStreams } from '../streams/live-streams.js';
import { idAfter } from '../streams/stream-source.js';
import { JobTimelineSource } from './job-timeline-source.js';
import { type AttemptQueueQuery, OpsRepository } from './ops.repository.js';
import {
  type JobEventPageView,
  type OpsJobPageView,
  type OpsJobView,
  type OpsStatsView,
  toEventView,
  type WaitingAttemptPageView,
} from './ops.view.js';

/** A timeline page's cursor: an event id (never 0), within bigint, or the database would refuse it (a 500). */
const EVENT_ID = (id: string) => id !== '0' && isEventId(id);
const TERMINAL = new Set(['succeeded', 'failed', 'cancelled']);

type WaitingAttemptsQuery = Pick<AttemptQueueQuery, 'status' | 'provider' | 'limit'> & {
  olderThan?: number;
  cursor?: string;
};

const iso = (date: Date) => new Date(date).toISOString();
const round = (value: number | null) => (value === null ? null : Math.round(value * 10) / 10);

/** Reads for operators (`ops:read`, any owner) and the job timeline (its owner, or an operator). */
@Injectable()
export class OpsService {
  constructor(
    private readonly ops: OpsRepository,
    private readonly streams: LiveStreams,
    @Inject(appConfig.KEY) private readonly config: AppConfig,
    private readonly streamTokens: StreamTokensService,
    private readonly credentials: CredentialWatch,
  ) {
    streams.addSweep((topics) => this.ops.latestEventIds(topics));
  }

  /**
   * The job's timeline as a live stream (docs/design.md#live-streams), to the same readers as listEvents (I7):
   * every event after `lastEventId`, then each as it commits, until STREAM_GRACE_MS after the terminal event.
   * Undefined when the job ended longer ago than that and nothing follows `lastEventId`: the stream is over, and
   * the answer (204) tells EventSource to stop reconnecting.
   */
  async streamEvents(
    principal: Principal,
    jobId: string,
    lastEventId: string | undefined,
  ): Promise<LiveStream | undefined> {
    const job = await this.ops.findTimelineState(jobId);
    const own = job?.owner_id === principal.ownerId && principal.scopes.includes('jobs:read');
    if (!job || !(own || principal.scopes.includes('ops:read'))) throw new NotFoundError('Job');
    const after = lastEventId === '0' ? undefined : lastEventId;
    const clockOffsetMs = job.now_ms - Date.now();
    const graceMs = this.config.streamGraceMs;
    if (TERMINAL.has(job.status) && job.completed_ms !== null && job.completed_ms + graceMs <= job.now_ms) {
      const latest = (await this.ops.latestEventIds([jobId])).get(jobId);
      if (latest === undefined || !idAfter(latest, after)) return undefined;
    }
    const source = new JobTimelineSource(jobId, this.ops, { graceMs, clockOffsetMs, completedMs: job.completed_ms });
    return this.streams.start(principal.ownerId, source, after, this.credentials.until(principal));
  }

  /** A stream token for the job's stream, to whoever may read that stream (I7): another owner's job is 404. */
  async issueStreamToken(principal: Principal, jobId: string): Promise<StreamTokenView> {
    await this.visibleOwner(principal, jobId);
    return toStreamTokenView('job', jobId, await this.streamTokens.issue(principal, { kind: 'job', id: jobId }));
  }

  private async visibleOwner(principal: Principal, jobId: string): Promise<string> {
    const owner = await this.ops.findJobOwner(jobId);
    const own = owner === principal.ownerId && principal.scopes.includes('jobs:read');
    if (owner === undefined || !(own || principal.scopes.includes('ops:read'))) throw new NotFoundError('Job');
    return owner;
  }

  /** The owner with `jobs:read` sees its own job's events; `ops:read` sees any job's. Another owner's job: 404 (I7). */
  async listEvents(
    principal: Principal,
    jobId: string,
    query: { limit: number; cursor?: string },
  ): Promise<JobEventPageView> {
    await this.visibleOwner(principal, jobId);
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

  async listJobs(query: {
    status?: JobStatus;
    owner?: string;
    idempotencyKey?: string;
    limit: number;
    cursor?: string;
  }): Promise<OpsJobPageView> {
    if (query.idempotencyKey !== undefined && query.owner === undefined) {
      throw new ValidationFailedError([
        { field: 'owner', message: 'is needed with idempotencyKey (a key is unique per owner only)' },
      ]);
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
