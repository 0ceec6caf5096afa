import { Injectable } from '@nestjs/common';
import { DataSource } from 'typeorm';

import { inTransaction, rowsOf } from '../database/transactions.js';
import { LIST_OWNER_SHARES, OWNER_SHARE, RECORD_OWNER_SHARE_CHANGE, UPSERT_OWNER_SHARE } from './owner-shares.sql.js';

export interface OwnerShareRow {
  owner_id: string;
  weight: number;
  max_concurrency: number | null;
  queued: number;
  in_flight: number;
  unknown: number;
  updated_at: Date | null;
}

export interface OwnerShareChange {
  ownerId: string;
  weight: number;
  maxConcurrency: number | null;
  actor: { ownerId: string; keyId: string | null; subject: string | null; issuer: string | null };
}

/**
 * Weights and caps (owner_shares), written by admins and read by every claim statement itself, so a change holds
 * on every replica from its commit. Each change is recorded in owner_share_changes with who made it (a key's id,
 * or a token's subject and issuer).
 */
@Injectable()
export class OwnerSharesRepository {
  constructor(private readonly dataSource: DataSource) {}

  async set(change: OwnerShareChange): Promise<OwnerShareRow> {
    return inTransaction(this.dataSource, async (manager) => {
      await manager.query(UPSERT_OWNER_SHARE.text, [change.ownerId, change.weight, change.maxConcurrency]);
      await manager.query(RECORD_OWNER_SHARE_CHANGE.text, [
        change.ownerId,
        change.weight,
        change.maxConcurrency,
        change.actor.keyId,
        change.actor.ownerId,
        change.actor.subject,
        change.actor.issuer,
      ]);
      const [row] = await rowsOf<OwnerShareRow>(manager, OWNER_SHARE, [change.ownerId]);
      return row;
    });
  }

  /**
   * Owners with live jobs or settings, the most queued first. One pass over the live jobs
   * (IDX_jobs_owner_status_created), so its cost grows with the backlog: an operator's read, not a hot path.
   */
  list(limit: number): Promise<OwnerShareRow[]> {
    return rowsOf<OwnerShareRow>(this.dataSource.manager, LIST_OWNER_SHARES, [limit]);
  }
}
