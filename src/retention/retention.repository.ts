import { Injectable } from '@nestjs/common';
import { DataSource } from 'typeorm';

import { rowsOf } from '../database/transactions.js';

/**
 * The one DELETE on jobs and their history (docs/operations.md#retention). job_events is append-only by trigger
 * except inside a transaction that set `onejob.purge` (migration AllowRetentionPurge1795977910000).
 */
@Injectable()
export class RetentionRepository {
  constructor(private readonly dataSource: DataSource) {}

  /**
   * Purges up to `limit` terminal jobs completed more than `days` ago, with their attempts, events and webhook
   * deliveries, in one transaction. Live jobs (pending, running, unknown) have no completed_at and are never
   * candidates. SKIP LOCKED: a job some transaction holds is left for the next batch. Returns the jobs purged and
   * how many of their webhook deliveries were still pending (never to be delivered now: the caller reports them).
   */
  async purgeBatch(days: number, limit: number): Promise<{ jobs: number; pendingDeliveries: number }> {
    return this.dataSource.transaction(async (manager) => {
      await manager.query(`SET LOCAL onejob.purge = 'on'`);
      const rows = await rowsOf<{ purged: number; pending_deliveries: number }>(
        manager,
        `WITH doomed AS (
           SELECT id FROM jobs
            WHERE completed_at < now() - $1 * interval '1 day' AND status IN ('succeeded', 'failed', 'cancelled')
            ORDER BY completed_at
            LIMIT $2
            FOR UPDATE SKIP LOCKED
         ), deliveries AS (
           DELETE FROM webhook_deliveries WHERE job_id IN (SELECT id FROM doomed) RETURNING status
         ), events AS (
           DELETE FROM job_events WHERE job_id IN (SELECT id FROM doomed)
         ), attempts AS (
           DELETE FROM attempts WHERE job_id IN (SELECT id FROM doomed)
         ), purged AS (
           DELETE FROM jobs WHERE id IN (SELECT id FROM doomed) RETURNING id
         )
         SELECT (SELECT count(*) FROM purged)::int AS purged,
                (SELECT count(*) FROM deliveries WHERE status = 'pending')::int AS pending_deliveries`,
        [days, limit],
      );
      return { jobs: rows[0]?.purged ?? 0, pendingDeliveries: rows[0]?.pending_deliveries ?? 0 };
    });
  }
}
