import { Injectable } from '@nestjs/common';
import { DataSource } from 'typeorm';

import { rowsOf } from '../database/transactions.js';
import { LIST_BUDGETS, REMOVE_BUDGET, UPSERT_BUDGET, USED_SINCE } from './budgets.sql.js';

export interface Budget {
  ownerId: string;
  monthlyLimit: number;
  currency: string;
}

export { BUDGETS_CHANNEL } from './budgets.sql.js';

/** Owners' monthly limits and their month-to-date spend. */
@Injectable()
export class BudgetsRepository {
  constructor(private readonly dataSource: DataSource) {}

  async listAll(): Promise<Budget[]> {
    const rows = await rowsOf<{ owner_id: string; monthly_limit: string; currency: string }>(
      this.dataSource.manager,
      LIST_BUDGETS,
    );
    return rows.map((r) => ({ ownerId: r.owner_id, monthlyLimit: Number(r.monthly_limit), currency: r.currency }));
  }

  // Every change NOTIFYs at its commit: each replica reloads its list of budgets (BudgetsService) at once.
  async upsert(budget: Budget): Promise<void> {
    await this.dataSource.query(UPSERT_BUDGET.text, [budget.ownerId, budget.monthlyLimit, budget.currency]);
  }

  async remove(ownerId: string): Promise<boolean> {
    const rows = await rowsOf<{ owner_id: string }>(this.dataSource.manager, REMOVE_BUDGET, [ownerId]);
    return rows.length > 0;
  }

  /**
   * The owner's spend in `currency` on attempts started since `since`, and what its live jobs still hold of their
   * reservations: the two sums the create's check adds up (INSERT_JOBS_WITHIN_BUDGET in ledger/jobs.repository.ts).
   */
  async usedSince(ownerId: string, currency: string, since: Date): Promise<{ spent: number; reserved: number }> {
    const rows = await rowsOf<{ spent: string; reserved: string }>(this.dataSource.manager, USED_SINCE, [
      ownerId,
      currency,
      since,
    ]);
    return { spent: Number(rows[0].spent), reserved: Number(rows[0].reserved) };
  }
}
