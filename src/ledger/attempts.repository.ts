import { Injectable } from '@nestjs/common';
import { DataSource } from 'typeorm';

import { LEASE_SLACK_MS } from '../config/catalog.types.js';
import { uniqueViolationOf } from '../database/pg-errors.js';
import { type Queryable, rowsOf, run } from '../database/transactions.js';
import {
  type Attempt,
  type AttemptError,
  attemptFromRow,
  type AttemptOutcome,
  type AttemptRow,
  type AttemptStatus,
  type ResolvedBy,
  type Usage,
} from './attempt.types.js';
import {
  CLAIM_LOOKUPS,
  CLAIM_QUEUED,
  COUNT_UNKNOWN_ATTEMPTS,
  FIND_ABANDONED_ATTEMPTS,
  FIND_JOB_ID_OF_ATTEMPT,
  FIND_OVERDUE_ATTEMPTS,
  FIND_UNKNOWN_OF_LIVE_JOBS,
  INSERT_ATTEMPT,
  INSERT_CLAIMED,
  LIST_ATTEMPTS_OF_JOB,
  LOCK_JOB_AND_ATTEMPT,
  MARK_RUNNING,
  MARKED_BY_WORKER,
  NOTE_PROVIDER_STATUS,
  OPERATION_OF_JOB,
  RECORD_PROVIDER_REQUEST,
  UPDATE_ATTEMPT_STATUS,
} from './attempts.sql.js';
import { type Job, jobFromRow, type JobRow, type JobStatus } from './job.types.js';
import { AttemptInProgressError } from './ledger.errors.js';

export interface NewAttempt {
  jobId: string;
  provider: string;
  jobVersion: number;
  timeoutMs: number;
  hardTimeoutMs: number;
  /** Set when a worker inserts and runs it; null for an attempt the API queued for a worker. */
  workerId: string | null;
}

/** A worker's claim of one job: the attempt to insert, and the job's status before (for the audit trail). */
export interface ClaimedStart extends NewAttempt {
  workerId: string;
  jobFrom: JobStatus;
}

export interface AttemptUpdate {
  outcome?: AttemptOutcome;
  error?: AttemptError;
  usage?: Usage;
  providerRequestId?: string | null;
  providerStatus?: string;
  /** Set when the attempt leaves `unknown`: who ended it (counted in onejob_unknown_resolved_total). */
  resolvedBy?: ResolvedBy;
  resultDigest?: string;
  finished?: boolean;
}

/** An attempt the reconciler asks its provider about: looked up, or (`cancel`) cancelled there. */
export interface LookupClaim {
  attempt: Attempt;
  cancel: boolean;
}

/** What the worker sends right before calling: the attempt and its timeouts, counted from this moment. */
export interface CallStart {
  id: string;
  timeoutMs: number;
  hardTimeoutMs: number;
}

/** The attempts table. Writes are reached only through the Ledger. */
@Injectable()
export class AttemptsRepository {
  constructor(private readonly dataSource: DataSource) {}

  async listForJob(jobId: string, manager: Queryable): Promise<Attempt[]> {
    const rows = await rowsOf<AttemptRow>(manager, LIST_ATTEMPTS_OF_JOB, [jobId]);
    return rows.map(attemptFromRow);
  }

  /** A plain INSERT: a second live attempt hits UQ_attempts_one_live_per_job (I3) and becomes a 409. */
  async insertAttempt(attempt: NewAttempt, manager: Queryable): Promise<Attempt> {
    try {
      const rows = await rowsOf<AttemptRow>(manager, INSERT_ATTEMPT, [
        attempt.jobId,
        attempt.provider,
        attempt.jobVersion,
        attempt.timeoutMs,
        attempt.hardTimeoutMs,
        attempt.workerId,
      ]);
      return attemptFromRow(rows[0]);
    } catch (error) {
      if (uniqueViolationOf(error) === 'UQ_attempts_one_live_per_job') throw new AttemptInProgressError();
      throw error;
    }
  }

  /**
   * One statement for a whole claim: the attempts (multi-row), their jobs marked `running` with the schedule
   * cleared, and an event for each. The caller holds every job's row lock (the claim's SKIP LOCKED SELECT).
   */
  async insertClaimed(starts: ClaimedStart[], manager: Queryable): Promise<Attempt[]> {
    if (!starts.length) return [];
    const rows = await rowsOf<AttemptRow>(manager, INSERT_CLAIMED, [
      starts.map((s) => s.jobId),
      starts.map((s) => s.provider),
      starts.map((s) => s.jobVersion),
      starts.map((s) => s.timeoutMs),
      starts.map((s) => s.hardTimeoutMs),
      starts.map((s) => s.workerId),
      starts.map((s) => s.jobFrom),
    ]);
    return rows.map(attemptFromRow);
  }

  /** A worker takes over an attempt the API queued. */
  async claimQueued(
    attemptId: string,
    workerId: string,
    timeoutMs: number,
    hardTimeoutMs: number,
    manager: Queryable,
  ): Promise<Attempt | undefined> {
    const rows = await rowsOf<AttemptRow>(manager, CLAIM_QUEUED, [attemptId, workerId, timeoutMs, hardTimeoutMs]);
    return rows[0] && attemptFromRow(rows[0]);
  }

  /**
   * Right before the provider calls: `starting` -> `running` for a batch, with deadlines counted from now, in
   * one statement with its events. An attempt already given up (the reconciler found it not sent), or whose
   * hard deadline passed while it waited, is not returned: it must not be sent. `again`: the worker's id, when
   * it asks again after losing the answer: the attempts it marked `running` already are returned as well.
   */
  async markRunning(calls: CallStart[], manager: Queryable, again?: string): Promise<Attempt[]> {
    if (!calls.length) return [];
    const rows = await rowsOf<AttemptRow>(manager, MARK_RUNNING, [
      calls.map((c) => c.id),
      calls.map((c) => c.timeoutMs),
      calls.map((c) => c.hardTimeoutMs),
      LEASE_SLACK_MS,
    ]);
    if (again) {
      const marked = new Set(rows.map((r) => r.id));
      const before = await rowsOf<AttemptRow>(manager, MARKED_BY_WORKER, [calls.map((c) => c.id), again]);
      rows.push(...before.filter((r) => !marked.has(r.id)));
    }
    return rows.map(attemptFromRow);
  }

  /**
   * The job, then the attempt, locked in that order in one round trip (the LATERAL runs per locked job row), so
   * no two writers can deadlock. Undefined when either is missing or the attempt is not the job's.
   */
  async lockPair(
    jobId: string,
    attemptId: string,
    manager: Queryable,
  ): Promise<{ job: Job; attempt: Attempt } | undefined> {
    const rows = await rowsOf<{ job: JobRow; attempt: AttemptRow }>(manager, LOCK_JOB_AND_ATTEMPT, [jobId, attemptId]);
    if (!rows[0]) return undefined;
    const job = rows[0].job;
    return {
      job: jobFromRow({
        ...job,
        created_at: new Date(job.created_at),
        updated_at: new Date(job.updated_at),
        completed_at: job.completed_at && new Date(job.completed_at),
      }),
      attempt: attemptFromRow(rows[0].attempt),
    };
  }

  /** The job id of an attempt, walled to its owner (I7) unless `ownerId` is null (an operator). */
  async findJobId(ownerId: string | null, attemptId: string): Promise<string | undefined> {
    const rows = await rowsOf<{ job_id: string }>(this.dataSource.manager, FIND_JOB_ID_OF_ATTEMPT, [
      attemptId,
      ownerId,
    ]);
    return rows[0]?.job_id;
  }

  /** Writes a transition the caller has checked against the state machine, under the job's row lock. */
  async updateStatus(
    attemptId: string,
    to: AttemptStatus,
    update: AttemptUpdate,
    manager: Queryable,
  ): Promise<Attempt> {
    const rows = await rowsOf<AttemptRow>(manager, UPDATE_ATTEMPT_STATUS, [
      attemptId,
      to,
      update.outcome ?? null,
      update.error ? JSON.stringify(update.error) : null,
      update.usage ? JSON.stringify(update.usage) : null,
      update.providerRequestId ?? null,
      update.resultDigest ?? null,
      update.finished ?? false,
      update.providerStatus ?? null,
      update.resolvedBy ?? null,
    ]);
    return attemptFromRow(rows[0]);
  }

  /** The provider gave the request its id (docs/design.md#resolution-at-the-provider): kept before the outcome. */
  async recordProviderRequest(attemptId: string, providerRequestId: string, manager: Queryable): Promise<void> {
    await run(manager, RECORD_PROVIDER_REQUEST, [attemptId, providerRequestId]);
  }

  /** What the provider last said of the request; the attempt's own status is not touched. */
  async noteProviderStatus(attemptId: string, providerStatus: string, manager: Queryable): Promise<void> {
    await run(manager, NOTE_PROVIDER_STATUS, [attemptId, providerStatus]);
  }

  /**
   * The attempts the reconciler asks their provider about now, claimed for this period across replicas (each
   * gets `provider_checked_at`, so no replica asks again within `periodMs`): unknown attempts of live jobs, to look
   * up; and, to cancel there (`cancel`), requests still running at the provider that nobody waits for any more:
   * given up by failover or an operator's `failed`, or of a job that ended (the owner's cancel). What the provider
   * answers still competes under I5, and is recorded when it loses. None for settled attempts, nor for those whose
   * record the provider no longer has (`expired`) or never gave (`unknowable`).
   */
  async claimLookups(providers: string[], periodMs: number, limit: number): Promise<LookupClaim[]> {
    if (!providers.length) return [];
    const rows = await rowsOf<AttemptRow & { cancel: boolean }>(this.dataSource.manager, CLAIM_LOOKUPS, [
      providers,
      periodMs,
      limit,
    ]);
    return rows.map((row) => ({ attempt: attemptFromRow(row), cancel: row.cancel }));
  }

  /** Claimed attempts still starting or running past their deadline (their worker may be gone). */
  async findOverdue(limit: number): Promise<Array<{ id: string; jobId: string }>> {
    const rows = await rowsOf<{ id: string; job_id: string }>(this.dataSource.manager, FIND_OVERDUE_ATTEMPTS, [limit]);
    return rows.map((r) => ({ id: r.id, jobId: r.job_id }));
  }

  /**
   * Unknown attempts of live jobs on the given providers (those whose policy can act: failover, or a status
   * lookup): held attempts on other providers wait for an operator and never crowd these out.
   */
  async findUnknownOfLiveJobs(providers: string[], limit: number): Promise<Attempt[]> {
    if (!providers.length) return [];
    const rows = await rowsOf<AttemptRow>(this.dataSource.manager, FIND_UNKNOWN_OF_LIVE_JOBS, [providers, limit]);
    return rows.map(attemptFromRow);
  }

  /** Unknown attempts of finished jobs whose hard deadline passed: nobody is listening any more. */
  async findAbandoned(limit: number): Promise<Array<{ id: string; jobId: string }>> {
    const rows = await rowsOf<{ id: string; job_id: string }>(this.dataSource.manager, FIND_ABANDONED_ATTEMPTS, [
      limit,
    ]);
    return rows.map((r) => ({ id: r.id, jobId: r.job_id }));
  }

  async operationOfJob(jobId: string): Promise<string> {
    const rows = await rowsOf<{ operation: string }>(this.dataSource.manager, OPERATION_OF_JOB, [jobId]);
    return rows[0].operation;
  }

  async countUnknown(): Promise<number> {
    const rows = await rowsOf<{ n: number }>(this.dataSource.manager, COUNT_UNKNOWN_ATTEMPTS);
    return rows[0].n;
  }
}
