import { Injectable } from '@nestjs/common';
import { DataSource } from 'typeorm';
import { rowsOf } from '../database/transactions.js';

export interface Budget {
  ownerId: string;
  monthlyLimit: number;
  currency: string;
}

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

  async upsert(budget: Budget): Promise<void> {
    await this.dataSource.query(
      `INSERT INTO owner_budgets (owner_id, monthly_limit, currency) VALUES ($1, $2, $3)
       ON CONFLICT (owner_id) DO UPDATE SET monthly_limit = EXCLUDED.monthly_limit, currency = EXCLUDED.currency, updated_at = now()`,
      [budget.ownerId, budget.monthlyLimit, budget.currency],
    );
  }

  async remove(ownerId: string): Promise<boolean> {
    const rows = await rowsOf<{ owner_id: string }>(
      this.dataSource.manager,
      `DELETE FROM owner_budgets WHERE owner_id = $1 RETURNING owner_id`,
      [ownerId],
    );
    return rows.length > 0;
  }

  /** The owner's spend in `currency` on attempts started since `since`. */
  async spentSince(ownerId: string, currency: string, since: Date): Promise<number> {
    const rows = await rowsOf<{ spent: string }>(
      this.dataSource.manager,
      `SELECT COALESCE(sum(a.cost), 0) AS spent FROM jobs j JOIN attempts a ON a.job_id = j.id
        WHERE j.owner_id = $1 AND a.cost_currency = $2 AND a.started_at >= $3`,
      [ownerId, currency, since],
    );
    return Number(rows[0].spent);
  }
}
