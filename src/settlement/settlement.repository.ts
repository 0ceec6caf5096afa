import { Injectable } from '@nestjs/common';
import { updatedRows, type Queryable } from '../database/transactions.js';
import type { JobStatus } from '../jobs/job.types.js';

export interface Settlement {
  status: Extract<JobStatus, 'succeeded' | 'failed'>;
  result?: unknown;
  error?: unknown;
  completedBy?: string;
}

@Injectable()
export class SettlementRepository {
  /**
   * The compare-and-swap of I5: it writes only if the job still has the version the attempt read and no
   * winner. Written by hand: TypeORM's save() with @VersionColumn does not put the version in the WHERE.
   * Returns the new version, or undefined when another settlement (or a cancellation) got there first.
   */
  async settleIfVersion(jobId: string, readVersion: number, settlement: Settlement, manager: Queryable): Promise<number | undefined> {
    const result = await manager.query(
      `UPDATE jobs SET status = $3, result = $4::jsonb, error = $5::jsonb, completed_by = $6,
              version = version + 1, completed_at = now(), updated_at = now(), next_attempt_at = NULL
        WHERE id = $1 AND version = $2 AND completed_by IS NULL
        RETURNING version`,
      [
        jobId,
        readVersion,
        settlement.status,
        settlement.result === undefined ? null : JSON.stringify(settlement.result),
        settlement.error === undefined ? null : JSON.stringify(settlement.error),
        settlement.completedBy ?? null,
      ],
    );
    return updatedRows<{ version: number }>(result)[0]?.version;
  }

  /** The fence: cancelling bumps the version, so every in-flight result loses its compare-and-swap. */
  async cancelIfLive(jobId: string, manager: Queryable): Promise<number | undefined> {
    const result = await manager.query(
      `UPDATE jobs SET status = 'cancelled', version = version + 1, next_attempt_at = NULL, completed_at = now(), updated_at = now(),
              error = jsonb_build_object('reason', 'cancelled', 'message', 'The owner cancelled the job.')
        WHERE id = $1 AND status IN ('pending', 'running', 'unknown')
        RETURNING version`,
      [jobId],
    );
    return updatedRows<{ version: number }>(result)[0]?.version;
  }
}
