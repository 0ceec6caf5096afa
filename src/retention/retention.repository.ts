import { Injectable } from '@nestjs/common';
import { DataSource } from 'typeorm';

import { rowsOf } from '../database/transactions.js';
import { ALLOW_PURGE, PURGE_BATCH } from './retention.sql.js';

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
      await manager.query(ALLOW_PURGE.text);
      const rows = await rowsOf<{ purged: number; pending_deliveries: number }>(manager, PURGE_BATCH, [days, limit]);
      return { jobs: rows[0]?.purged ?? 0, pendingDeliveries: rows[0]?.pending_deliveries ?? 0 };
    });
  }
}
