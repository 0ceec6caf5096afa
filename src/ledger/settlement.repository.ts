import { Injectable } from '@nestjs/common';
import { rowsOf, type Queryable } from '../database/transactions.js';
import type { AttemptStatus, Usage } from './attempt.types.js';
import type { JobStatus } from './job.types.js';

export interface ArrivedResultWrite {
  jobId: string;
  attemptId: string;
  /** The attempt statuses from which `succeeded` is a legal move (the state machine's, passed in). */
  eligibleFrom: readonly AttemptStatus[];
  value: unknown;
  usage: Usage;
  providerRequestId: string | null;
  resultDigest: string;
}

/** What the settlement statement saw under its locks, and what it did. */
export interface SettledResult {
  /** The job's new version when the result won; null when it lost. */
  version: number | null;
  /** Outbox rows written for the win (one per subscribed endpoint). */
  announced: number;
  attemptFrom: AttemptStatus;
  attemptTo: AttemptStatus;
  /** Set when this attempt had already delivered a result (the same answer reported twice). */
  priorOutcome: string | null;
  provider: string;
  jobFrom: JobStatus;
  jobVersion: number;
  readVersion: number;
  winner: string | null;
}

/**
 * The compare-and-swap statements of I5, written by hand: TypeORM's save() with @VersionColumn does not put the
 * version in the WHERE clause (docs/design.md#why-hand-written-sql). Callers hold the job's row lock.
 */
@Injectable()
export class SettlementRepository {
  /**
   * One autocommit statement settles a result: it locks the job, then the attempt (the attempt's row is found
   * through an InitPlan on the locked job, so the order holds), makes the compare-and-swap on the job
   * (`version = read version AND completed_by IS NULL`), writes the attempt's outcome (won, or discarded with the
   * payload's digest only) and the events. Undefined when the attempt is not the job's.
   */
  async settleResult(write: ArrivedResultWrite, manager: Queryable): Promise<SettledResult | undefined> {
    const rows = await rowsOf<{
      version: number | null;
      announced: number;
      attempt_from: AttemptStatus | null;
      attempt_to: AttemptStatus | null;
      prior_outcome: string | null;
      provider: string;
      job_from: JobStatus;
      job_version: number;
      read_version: number;
      winner: string | null;
    }>(
      manager,
      `WITH j AS MATERIALIZED (
         SELECT id, status, version, completed_by FROM jobs WHERE id = $1 FOR UPDATE
       ), a AS MATERIALIZED (
         SELECT x.id, x.status, x.outcome, x.job_version, x.provider FROM attempts x
          WHERE x.id = $2 AND x.job_id = (SELECT id FROM j) FOR UPDATE
       ), won AS (
         UPDATE jobs SET status = 'succeeded', result = $3::jsonb, completed_by = $2, version = version + 1,
                completed_at = now(), updated_at = now(), next_attempt_at = NULL
          WHERE id = $1 AND completed_by IS NULL
            AND version = (SELECT job_version FROM a WHERE outcome IS NULL AND status = ANY($4::text[]))
          RETURNING version, owner_id, operation, idempotency_key, completed_at
       ), outbox AS (
         -- The transactional outbox (docs/operations.md#webhooks): the owner's subscribed endpoints get the
         -- announcement in this same statement, so a committed win is always announced and a loss never is.
         INSERT INTO webhook_deliveries (endpoint_id, owner_id, job_id, event_type, payload)
         SELECT w.id, won.owner_id, $1, 'job.succeeded',
                jsonb_build_object('type', 'job.succeeded', 'timestamp', now(), 'data', jsonb_build_object(
                  'jobId', $1::uuid, 'attemptId', NULL, 'status', 'succeeded', 'operation', won.operation,
                  'idempotencyKey', won.idempotency_key, 'version', won.version, 'result', $3::jsonb, 'error', NULL,
                  'completedBy', $2::uuid, 'completedAt', won.completed_at))
           FROM won JOIN webhook_endpoints w ON w.owner_id = won.owner_id AND w.status = 'enabled' AND 'job.succeeded' = ANY (w.events)
          RETURNING 1
       ), att AS (
         UPDATE attempts x SET status = CASE WHEN a.status = ANY($4::text[]) THEN 'succeeded' ELSE x.status END,
                outcome = CASE WHEN EXISTS (SELECT 1 FROM won) THEN 'won' ELSE 'discarded' END,
                usage = $5::jsonb, provider_request_id = COALESCE($6, x.provider_request_id), result_digest = $7,
                finished_at = COALESCE(x.finished_at, now())
           FROM a WHERE x.id = a.id AND a.outcome IS NULL
          RETURNING x.status, x.outcome
       ), ev AS (
         INSERT INTO job_events (job_id, attempt_id, subject, from_status, to_status, reason, detail)
         SELECT $1, $2, 'attempt', a.status, att.status,
                CASE WHEN att.outcome = 'won' THEN 'result_won' ELSE 'result_discarded' END,
                CASE WHEN att.outcome = 'won' THEN NULL
                     ELSE jsonb_build_object('resultDigest', $7::text, 'readVersion', a.job_version, 'jobVersion', j.version,
                                             'winner', j.completed_by, 'jobStatus', j.status) END
           FROM att, a, j
         UNION ALL
         SELECT $1, NULL, 'job', j.status, 'succeeded', 'result_won', jsonb_build_object('attemptId', $2::uuid, 'version', won.version) FROM won, j
       )
       SELECT (SELECT version FROM won) AS version, (SELECT count(*)::int FROM outbox) AS announced, a.status AS attempt_from, (SELECT status FROM att) AS attempt_to,
              a.outcome AS prior_outcome, a.provider, j.status AS job_from, j.version AS job_version,
              a.job_version AS read_version, j.completed_by AS winner
         FROM a, j`,
      [write.jobId, write.attemptId, JSON.stringify(write.value), write.eligibleFrom, JSON.stringify(write.usage), write.providerRequestId, write.resultDigest],
    );
    const row = rows[0];
    if (!row) return undefined;
    return {
      version: row.version,
      announced: row.announced,
      attemptFrom: row.attempt_from!,
      attemptTo: row.attempt_to ?? row.attempt_from!,
      priorOutcome: row.prior_outcome,
      provider: row.provider,
      jobFrom: row.job_from,
      jobVersion: row.job_version,
      readVersion: row.read_version,
      winner: row.winner,
    };
  }

  /** A final failure goes through the same compare-and-swap. Undefined when something else settled first. */
  async failIfVersion(jobId: string, readVersion: number, error: unknown, manager: Queryable): Promise<number | undefined> {
    const rows = await rowsOf<{ version: number }>(
      manager,
      `UPDATE jobs SET status = 'failed', error = $3::jsonb, version = version + 1, completed_at = now(), updated_at = now(), next_attempt_at = NULL
        WHERE id = $1 AND version = $2 AND completed_by IS NULL
        RETURNING version`,
      [jobId, readVersion, JSON.stringify(error)],
    );
    return rows[0]?.version;
  }

  /** The fence: cancelling bumps the version, so every in-flight result loses its compare-and-swap. */
  async cancelIfLive(jobId: string, manager: Queryable): Promise<number | undefined> {
    const rows = await rowsOf<{ version: number }>(
      manager,
      `UPDATE jobs SET status = 'cancelled', version = version + 1, next_attempt_at = NULL, completed_at = now(), updated_at = now(),
              error = jsonb_build_object('reason', 'cancelled', 'message', 'The owner cancelled the job.')
        WHERE id = $1 AND status IN ('pending', 'running', 'unknown')
        RETURNING version`,
      [jobId],
    );
    return rows[0]?.version;
  }
}
