import { Injectable } from '@nestjs/common';
import { DataSource } from 'typeorm';

import { LEASE_SLACK_MS } from '../config/catalog.types.js';
import { uniqueViolationOf } from '../database/pg-errors.js';
import { prepared } from '../database/prepared-statements.js';
import { type Queryable, rowsOf } from '../database/transactions.js';
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

/** What the worker sends right before calling: the attempt and its timeouts, counted from this moment. */
export interface CallStart {
  id: string;
  timeoutMs: number;
  hardTimeoutMs: number;
}

const interval = (param: string) => `make_interval(secs => ${param}::float8 / 1000)`;

/** An attempt's columns, named: a registered statement must not return `*` (database/prepared-statements.ts). */
const ATTEMPT_COLUMNS = `id, job_id, number, provider, status, outcome, job_version, deadline_at, hard_deadline_at, claimed_at, worker_id,
  provider_request_id, provider_status, provider_checked_at, resolved_by, usage, error, result_digest, started_at, finished_at,
  cost, cost_currency`;

// The claim path's statements, named like the request path's (database/prepared-statements.ts): a claim's
// attempts, and the mark right before the calls.
const INSERT_CLAIMED = prepared(`WITH p AS (
         SELECT * FROM unnest($1::uuid[], $2::text[], $3::int[], $4::float8[], $5::float8[], $6::text[], $7::text[])
                    AS p(job_id, provider, job_version, timeout_ms, hard_ms, worker_id, job_from)
       ), ins AS (
         INSERT INTO attempts (job_id, number, provider, job_version, deadline_at, hard_deadline_at, claimed_at, worker_id)
         SELECT p.job_id, COALESCE((SELECT max(number) FROM attempts x WHERE x.job_id = p.job_id), 0) + 1, p.provider, p.job_version,
                now() + ${interval('p.timeout_ms')}, now() + ${interval('p.hard_ms')}, now(), p.worker_id
           FROM p
         RETURNING *
       ), jb AS (
         UPDATE jobs j SET status = 'running', updated_at = now(), next_attempt_at = NULL, waiting_for = NULL FROM p WHERE j.id = p.job_id
       ), ev AS (
         INSERT INTO job_events (job_id, attempt_id, subject, from_status, to_status, reason, detail)
         SELECT ins.job_id, ins.id, 'attempt', NULL, 'starting', 'claimed', jsonb_build_object('provider', ins.provider, 'number', ins.number) FROM ins
         UNION ALL
         SELECT p.job_id, NULL, 'job', p.job_from, 'running', 'attempt_started', NULL FROM p WHERE p.job_from <> 'running'
       )
       SELECT ${ATTEMPT_COLUMNS} FROM ins`);

// The jobs are share-locked first (id order, then the attempts: the one lock order): a job's events then commit in
// the order of their ids, which a live stream relies on (docs/design.md#live-streams). Two marks share the lock.
const MARK_RUNNING = prepared(`WITH p AS (
         SELECT * FROM unnest($1::uuid[], $2::float8[], $3::float8[]) AS p(id, timeout_ms, hard_ms)
       ), jl AS MATERIALIZED (
         SELECT j.id FROM jobs j WHERE j.id IN (SELECT x.job_id FROM attempts x WHERE x.id IN (SELECT id FROM p))
          ORDER BY j.id FOR SHARE
       ), m AS (
         UPDATE attempts a SET status = 'running', started_at = now(),
                deadline_at = now() + ${interval('p.timeout_ms')}, hard_deadline_at = now() + ${interval('p.hard_ms')}
           FROM p WHERE a.id = p.id AND a.status = 'starting' AND a.hard_deadline_at > now()
            AND a.job_id = ANY ((SELECT array_agg(id) FROM jl)::uuid[])
         RETURNING a.*
       ), ev AS (
         INSERT INTO job_events (job_id, attempt_id, subject, from_status, to_status, reason)
         SELECT job_id, id, 'attempt', 'starting', 'running', 'provider_called' FROM m
       ), lease AS (
         -- A capped provider's lease must outlive the call, whose hard deadline counts from now.
         UPDATE provider_leases l SET expires_at = m.hard_deadline_at + ${interval('$4')} FROM m WHERE l.attempt_id = m.id
       )
       SELECT ${ATTEMPT_COLUMNS} FROM m`);

/** The attempts table. Writes are reached only through the Ledger. */
/**
 * A provider status never goes back from an end (completed, failed, cancelled, incomplete, expired, unknowable) to
 * queued or in_progress: a retrieve sent before a cancel may answer after it, and must not undo what the cancel said.
 */
const NEXT_PROVIDER_STATUS = (value: string) =>
  `CASE WHEN ${value}::text IS NULL OR (${value}::text IN ('queued', 'in_progress') AND provider_status IS NOT NULL
                 AND provider_status NOT IN ('queued', 'in_progress')) THEN provider_status ELSE ${value}::text END`;

@Injectable()
export class AttemptsRepository {
  constructor(private readonly dataSource: DataSource) {}

  async listForJob(jobId: string, manager: Queryable): Promise<Attempt[]> {
    const rows = await rowsOf<AttemptRow>(manager, 'SELECT * FROM attempts WHERE job_id = $1 ORDER BY number', [jobId]);
    return rows.map(attemptFromRow);
  }

  /** A plain INSERT: a second live attempt hits UQ_attempts_one_live_per_job (I3) and becomes a 409. */
  async insertAttempt(attempt: NewAttempt, manager: Queryable): Promise<Attempt> {
    try {
      const rows = await rowsOf<AttemptRow>(
        manager,
        `INSERT INTO attempts (job_id, number, provider, job_version, deadline_at, hard_deadline_at, claimed_at, worker_id)
         VALUES ($1, COALESCE((SELECT max(number) FROM attempts WHERE job_id = $1), 0) + 1, $2, $3,
                 now() + ${interval('$4')}, now() + ${interval('$5')}, CASE WHEN $6::text IS NULL THEN NULL ELSE now() END, $6)
         RETURNING *`,
        [
          attempt.jobId,
          attempt.provider,
          attempt.jobVersion,
          attempt.timeoutMs,
          attempt.hardTimeoutMs,
          attempt.workerId,
        ],
      );
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
    const rows = await rowsOf<AttemptRow>(
      manager,
      `UPDATE attempts SET claimed_at = now(), worker_id = $2, started_at = now(),
              deadline_at = now() + ${interval('$3')}, hard_deadline_at = now() + ${interval('$4')}
        WHERE id = $1 AND status = 'starting' AND claimed_at IS NULL RETURNING *`,
      [attemptId, workerId, timeoutMs, hardTimeoutMs],
    );
    return rows[0] && attemptFromRow(rows[0]);
  }

  /**
   * Right before the provider calls: `starting` -> `running` for a batch, with deadlines counted from now, in
   * one statement with its events. An attempt already given up (the reconciler found it not sent), or whose
   * hard deadline passed while it waited, is not returned: it must not be sent.
   */
  async markRunning(calls: CallStart[], manager: Queryable): Promise<Attempt[]> {
    if (!calls.length) return [];
    const rows = await rowsOf<AttemptRow>(manager, MARK_RUNNING, [
      calls.map((c) => c.id),
      calls.map((c) => c.timeoutMs),
      calls.map((c) => c.hardTimeoutMs),
      LEASE_SLACK_MS,
    ]);
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
    const rows = await rowsOf<{ job: JobRow; attempt: AttemptRow }>(
      manager,
      `WITH j AS MATERIALIZED (SELECT * FROM jobs WHERE id = $1 FOR UPDATE)
       SELECT row_to_json(j) AS job, row_to_json(a) AS attempt
         FROM j, LATERAL (SELECT * FROM attempts WHERE id = $2 AND job_id = j.id FOR UPDATE) a`,
      [jobId, attemptId],
    );
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
    const rows = await rowsOf<{ job_id: string }>(
      this.dataSource.manager,
      'SELECT a.job_id FROM attempts a JOIN jobs j ON j.id = a.job_id WHERE a.id = $1 AND ($2::text IS NULL OR j.owner_id = $2)',
      [attemptId, ownerId],
    );
    return rows[0]?.job_id;
  }

  /** Writes a transition the caller has checked against the state machine, under the job's row lock. */
  async updateStatus(
    attemptId: string,
    to: AttemptStatus,
    update: AttemptUpdate,
    manager: Queryable,
  ): Promise<Attempt> {
    const rows = await rowsOf<AttemptRow>(
      manager,
      `UPDATE attempts SET status = $2,
              outcome = COALESCE($3, outcome), error = COALESCE($4::jsonb, error), usage = COALESCE($5::jsonb, usage),
              provider_request_id = COALESCE($6, provider_request_id), result_digest = COALESCE($7, result_digest),
              finished_at = CASE WHEN $8 THEN COALESCE(finished_at, now()) ELSE finished_at END,
              provider_status = ${NEXT_PROVIDER_STATUS('$9')}, resolved_by = COALESCE($10, resolved_by)
        WHERE id = $1 RETURNING *`,
      [
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
      ],
    );
    return attemptFromRow(rows[0]);
  }

  /** The provider gave the request its id (docs/design.md#resolution-at-the-provider): kept before the outcome. */
  async recordProviderRequest(attemptId: string, providerRequestId: string, manager: Queryable): Promise<void> {
    await manager.query(
      `UPDATE attempts SET provider_request_id = $2, provider_status = COALESCE(provider_status, 'queued') WHERE id = $1`,
      [attemptId, providerRequestId],
    );
  }

  /** What the provider last said of the request; the attempt's own status is not touched. */
  async noteProviderStatus(attemptId: string, providerStatus: string, manager: Queryable): Promise<void> {
    await manager.query(`UPDATE attempts SET provider_status = ${NEXT_PROVIDER_STATUS('$2')} WHERE id = $1`, [
      attemptId,
      providerStatus,
    ]);
  }

  /**
   * The attempts the reconciler looks up at their provider now, claimed for this period across replicas (each
   * gets `provider_checked_at`, so no replica asks again within `periodMs`): unknown attempts of live jobs, and
   * attempts given up by failover whose request was still running at the provider (its answer still competes
   * under I5, and is recorded when it loses). None for settled attempts, nor for those whose record the provider
   * no longer has (`expired`) or never gave (`unknowable`).
   */
  async claimLookups(providers: string[], periodMs: number, limit: number): Promise<Attempt[]> {
    if (!providers.length) return [];
    const rows = await rowsOf<AttemptRow>(
      this.dataSource.manager,
      `WITH c AS (
         SELECT a.id FROM attempts a JOIN jobs j ON j.id = a.job_id
          WHERE a.provider = ANY($1::text[])
            AND ((a.status = 'unknown' AND j.status IN ('pending', 'running', 'unknown')
                  AND a.provider_status IS DISTINCT FROM 'expired' AND a.provider_status IS DISTINCT FROM 'unknowable')
                 OR (a.status = 'cancelled' AND a.provider_status IN ('queued', 'in_progress') AND a.outcome IS NULL))
            AND (a.provider_checked_at IS NULL OR a.provider_checked_at <= now() - ${interval('$2')})
          ORDER BY a.provider_checked_at NULLS FIRST, a.deadline_at
          LIMIT $3
          FOR UPDATE OF a SKIP LOCKED
       )
       UPDATE attempts a SET provider_checked_at = now() FROM c WHERE a.id = c.id RETURNING a.*`,
      [providers, periodMs, limit],
    );
    return rows.map(attemptFromRow);
  }

  /** Claimed attempts still starting or running past their deadline (their worker may be gone). */
  async findOverdue(limit: number): Promise<Array<{ id: string; jobId: string }>> {
    const rows = await rowsOf<{ id: string; job_id: string }>(
      this.dataSource.manager,
      `SELECT id, job_id FROM attempts
        WHERE status IN ('starting', 'running') AND claimed_at IS NOT NULL AND deadline_at < now()
        ORDER BY deadline_at LIMIT $1`,
      [limit],
    );
    return rows.map((r) => ({ id: r.id, jobId: r.job_id }));
  }

  /**
   * Unknown attempts of live jobs on the given providers (those whose policy can act: failover, or a status
   * lookup): held attempts on other providers wait for an operator and never crowd these out.
   */
  async findUnknownOfLiveJobs(providers: string[], limit: number): Promise<Attempt[]> {
    if (!providers.length) return [];
    const rows = await rowsOf<AttemptRow>(
      this.dataSource.manager,
      `SELECT a.* FROM attempts a JOIN jobs j ON j.id = a.job_id
        WHERE a.status = 'unknown' AND a.provider = ANY($1::text[]) AND j.status IN ('pending', 'running', 'unknown')
        ORDER BY a.deadline_at LIMIT $2`,
      [providers, limit],
    );
    return rows.map(attemptFromRow);
  }

  /** Unknown attempts of finished jobs whose hard deadline passed: nobody is listening any more. */
  async findAbandoned(limit: number): Promise<Array<{ id: string; jobId: string }>> {
    const rows = await rowsOf<{ id: string; job_id: string }>(
      this.dataSource.manager,
      `SELECT a.id, a.job_id FROM attempts a JOIN jobs j ON j.id = a.job_id
        WHERE a.status = 'unknown' AND j.status IN ('succeeded', 'failed', 'cancelled') AND a.hard_deadline_at < now()
        LIMIT $1`,
      [limit],
    );
    return rows.map((r) => ({ id: r.id, jobId: r.job_id }));
  }

  async operationOfJob(jobId: string): Promise<string> {
    const rows = await rowsOf<{ operation: string }>(
      this.dataSource.manager,
      'SELECT operation FROM jobs WHERE id = $1',
      [jobId],
    );
    return rows[0].operation;
  }

  async countUnknown(): Promise<number> {
    const rows = await rowsOf<{ n: number }>(
      this.dataSource.manager,
      `SELECT count(*)::int AS n FROM attempts WHERE status = 'unknown'`,
    );
    return rows[0].n;
  }
}
