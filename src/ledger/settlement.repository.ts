import { Injectable } from '@nestjs/common';
import { rowsOf, type Queryable } from '../database/transactions.js';
import type { AttemptStatus, Usage } from './attempt.types.js';
import type { JobStatus } from './job.types.js';

export interface ArrivedResultWrite {
  jobId: string;
  attemptId: string;
  /** The job version the attempt read when it started: the compare in compare-and-swap. */
  readVersion: number;
  /** False when the attempt may not become `succeeded` any more (an operator resolved it failed): it can only lose. */
  eligible: boolean;
  value: unknown;
  usage: Usage;
  providerRequestId: string | null;
  resultDigest: string;
  /** For the audit trail: the statuses read under the caller's locks. */
  attemptFrom: AttemptStatus;
  jobFrom: JobStatus;
  /** Recorded on a discarded result's event. */
  discardDetail: unknown;
}

/**
 * The compare-and-swap statements of I5, written by hand: TypeORM's save() with @VersionColumn does not put the
 * version in the WHERE clause (docs/design.md#why-hand-written-sql). Callers hold the job's row lock.
 */
@Injectable()
export class SettlementRepository {
  /**
   * One statement settles a result: the CAS on the job (`version = read version AND completed_by IS NULL`), the
   * attempt's outcome (won or discarded, with the payload's digest) and both events. Returns the job's new
   * version when the result won, undefined when it lost.
   */
  async settleResult(write: ArrivedResultWrite, manager: Queryable): Promise<number | undefined> {
    const rows = await rowsOf<{ version: number | null }>(
      manager,
      `WITH won AS (
         UPDATE jobs SET status = 'succeeded', result = $3::jsonb, completed_by = $2, version = version + 1,
                completed_at = now(), updated_at = now(), next_attempt_at = NULL
          WHERE id = $1 AND version = $4 AND completed_by IS NULL AND $5::boolean
          RETURNING version
       ), att AS (
         UPDATE attempts SET status = CASE WHEN $5::boolean THEN 'succeeded' ELSE status END,
                outcome = CASE WHEN EXISTS (SELECT 1 FROM won) THEN 'won' ELSE 'discarded' END,
                usage = $6::jsonb, provider_request_id = COALESCE($7, provider_request_id), result_digest = $8,
                finished_at = COALESCE(finished_at, now())
          WHERE id = $2
          RETURNING status, outcome
       ), ev AS (
         INSERT INTO job_events (job_id, attempt_id, subject, from_status, to_status, reason, detail)
         SELECT $1, $2, 'attempt', $9, att.status,
                CASE WHEN att.outcome = 'won' THEN 'result_won' ELSE 'result_discarded' END,
                CASE WHEN att.outcome = 'won' THEN NULL ELSE $11::jsonb END
           FROM att
         UNION ALL
         SELECT $1, NULL, 'job', $10, 'succeeded', 'result_won', jsonb_build_object('attemptId', $2::uuid, 'version', won.version) FROM won
       )
       SELECT (SELECT version FROM won) AS version`,
      [
        write.jobId,
        write.attemptId,
        JSON.stringify(write.value),
        write.readVersion,
        write.eligible,
        JSON.stringify(write.usage),
        write.providerRequestId,
        write.resultDigest,
        write.attemptFrom,
        write.jobFrom,
        JSON.stringify(write.discardDetail),
      ],
    );
    return rows[0]?.version ?? undefined;
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
