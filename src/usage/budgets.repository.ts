import { Injectable } from '@nestjs/common';
import { DataSource } from 'typeorm';

import { rowsOf } from '../database/transactions.js';

export interface Budget {
  ownerId: string;
  monthlyLimit: number;
  currency: string;
}

export const BUDGETS_CHANNEL = 'onejob_budgets';

/** Owners' monthly limits and their month-to-date spend. */
@Injectable()
export class BudgetsRepository {
  constructor(private readonly dataSource: DataSource) {}

  async listAll(): Promise<Budget[]> {
    const rows = await rowsOf<{ owner_id: string; monthly_limit: string; currency: string }>(
      this.dataSource.manager,
      `SELECT owner_id, monthly_limit, currency FROM owner_budgets`,
    );
    return rows.map((r) => ({ ownerId: r.owner_id, monthlyLimit: Number(r.monthly_limit), currency: r.currency }));
  }

  // Every change NOTIFYs at its commit: each replica reloads its list of budgets (BudgetsService) at once.
  async upsert(budget: Budget): Promise<void> {
    await this.dataSource.query(
      `WITH b AS (
         INSERT INTO owner_budgets (owner_id, monthly_limit, currency) VALUES ($1, $2, $3)
         ON CONFLICT (owner_id) DO UPDATE SET monthly_limit = EXCLUDED.monthly_limit, currency = EXCLUDED.currency,
           updated_at = now()
         RETURNING owner_id
       )
       SELECT pg_notify('${BUDGETS_CHANNEL}', owner_id) FROM b`,
      [budget.ownerId, budget.monthlyLimit, budget.currency],
    );
  }

  async remove(ownerId: string): Promise<boolean> {
    const rows = await rowsOf<{ owner_id: string }>(
      this.dataSource.manager,
      `WITH b AS (DELETE FROM owner_budgets WHERE owner_id = $1 RETURNING owner_id)
       SELECT owner_id, pg_notify('${BUDGETS_CHANNEL}', owner_id) FROM b`,
      [ownerId],
    );
    return rows.length > 0;
  }

  /**
   * The owner's spend in `currency` on attempts started since `since`, and what its live jobs still hold of their
   * reservations: the two sums the create's check adds up (INSERT_JOBS_WITHIN_BUDGET in ledger/jobs.repository.ts).
   */
  async usedSince(ownerId: string, currency: string, since: Date): Promise<{ spent: number; reserved: number }> {
    const rows = await rowsOf<{ spent: string; reserved: string }>(
      this.dataSource.manager,
      `SELECT (SELECT COALESCE(sum(a.cost), 0) FROM jobs j JOIN attempts a ON a.job_id = j.id
                WHERE j.owner_id = $1 AND a.cost_currency = $2 AND a.started_at >= $3) AS spent,
              (SELECT COALESCE(sum(GREATEST(j.reserved_cost
                       - COALESCE((SELECT sum(a.cost) FROM attempts a WHERE a.job_id = j.id AND a.cost_currency = $2),
                         0), 0)), 0)
                 FROM jobs j WHERE j.owner_id = $1 AND j.status IN ('pending', 'running', 'unknown')
                   AND j.reserved_currency = $2)
                AS reserved`,
      [ownerId, currency, since],
    );
    return { spent: Number(rows[0].spent), reserved: Number(rows[0].reserved) };
  }
}
