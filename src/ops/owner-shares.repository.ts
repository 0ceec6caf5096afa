import { Injectable } from '@nestjs/common';
import { DataSource } from 'typeorm';

import { inTransaction, rowsOf } from '../database/transactions.js';

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
  actor: { keyId: string; owner: string };
}

/**
 * Weights and caps (owner_shares), written by admins and read by every claim statement itself, so a change holds
 * on every replica from its commit. Each change is recorded in owner_share_changes with the acting key.
 */
@Injectable()
export class OwnerSharesRepository {
  constructor(private readonly dataSource: DataSource) {}

  async set(change: OwnerShareChange): Promise<OwnerShareRow> {
    return inTransaction(this.dataSource, async (manager) => {
      await manager.query(
        `INSERT INTO owner_shares (owner_id, weight, max_concurrency) VALUES ($1, $2, $3)
         ON CONFLICT (owner_id) DO UPDATE SET weight = EXCLUDED.weight, max_concurrency = EXCLUDED.max_concurrency,
           updated_at = now()`,
        [change.ownerId, change.weight, change.maxConcurrency],
      );
      await manager.query(
        `INSERT INTO owner_share_changes (owner_id, weight, max_concurrency, actor_key_id, actor_owner) VALUES ($1,
          $2, $3, $4, $5)`,
        [change.ownerId, change.weight, change.maxConcurrency, change.actor.keyId, change.actor.owner],
      );
      const [row] = await rowsOf<OwnerShareRow>(manager, `${OWNERS} WHERE o.owner_id = $1`, [change.ownerId]);
      return row;
    });
  }

  /**
   * Owners with live jobs or settings, the most queued first. One pass over the live jobs
   * (IDX_jobs_owner_status_created), so its cost grows with the backlog: an operator's read, not a hot path.
   */
  list(limit: number): Promise<OwnerShareRow[]> {
    return rowsOf<OwnerShareRow>(
      this.dataSource.manager,
      `${OWNERS} WHERE o.queued + o.in_flight + o.unknown > 0 OR o.weight <> 1 OR o.max_concurrency IS NOT NULL
        ORDER BY o.queued DESC, o.in_flight DESC, o.owner_id LIMIT $1`,
      [limit],
    );
  }
}

const OWNERS = `SELECT * FROM (
  SELECT COALESCE(s.owner_id, l.owner_id) AS owner_id, COALESCE(s.weight, 1)::int AS weight, s.max_concurrency,
         COALESCE(l.queued, 0)::int AS queued, COALESCE(l.in_flight, 0)::int AS in_flight, COALESCE(l.unknown,
           0)::int AS unknown,
         s.updated_at
    FROM (SELECT owner_id, count(*) FILTER (WHERE status = 'pending') AS queued,
                 count(*) FILTER (WHERE status = 'running') AS in_flight,
                   count(*) FILTER (WHERE status = 'unknown') AS unknown
            FROM jobs WHERE status IN ('pending', 'running', 'unknown') GROUP BY owner_id) l
    FULL JOIN owner_shares s ON s.owner_id = l.owner_id
) o`;
