import { Injectable } from '@nestjs/common';
import { DomainError, NotFoundError } from '../common/domain.errors.js';
import { BudgetsRepository, type Budget } from './budgets.repository.js';

/** How stale the budget list and an owner's spend may be: a budget can be overrun by this much spending time. */
const BUDGETS_TTL_MS = 10_000;
const SPEND_TTL_MS = 5_000;

export class BudgetExceededError extends DomainError {
  constructor(budget: Budget, spent: number, resetsAt: Date) {
    super(
      'budget_exceeded',
      429,
      `The monthly budget of ${budget.monthlyLimit} ${budget.currency} is spent (${spent} ${budget.currency} this month). It resets at ${resetsAt.toISOString()}.`,
      [{ field: 'budget', message: `resets at ${resetsAt.toISOString()}` }],
    );
    this.retryAfterSeconds = Math.max(1, Math.ceil((resetsAt.getTime() - Date.now()) / 1000));
  }
}

export interface BudgetStatus extends Budget {
  spent: number;
  resetsAt: Date;
}

const monthStart = (now: Date) => new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1));
const nextMonthStart = (now: Date) => new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() + 1, 1));

/**
 * Optional monthly budgets per owner. The create path asks `assertWithin`: owners without a budget cost a map
 * lookup (the list is reloaded every 10 s); an owner with one, a month-to-date sum at most every 5 s.
 */
@Injectable()
export class BudgetsService {
  private budgets = new Map<string, Budget>();
  private loadedAt = 0;
  private loading?: Promise<void>;
  private readonly spend = new Map<string, { amount: number; at: number }>();

  constructor(private readonly repository: BudgetsRepository) {}

  /** Throws BudgetExceededError when the owner has a budget and this month's spend has reached it. */
  async assertWithin(ownerId: string): Promise<void> {
    const budget = await this.budgetOf(ownerId);
    if (!budget) return;
    const now = new Date();
    let cached = this.spend.get(ownerId);
    if (!cached || Date.now() - cached.at > SPEND_TTL_MS) {
      cached = { amount: await this.repository.spentSince(ownerId, budget.currency, monthStart(now)), at: Date.now() };
      this.spend.set(ownerId, cached);
    }
    if (cached.amount >= budget.monthlyLimit) throw new BudgetExceededError(budget, cached.amount, nextMonthStart(now));
  }

  async status(ownerId: string): Promise<BudgetStatus> {
    this.loadedAt = 0;
    const budget = await this.budgetOf(ownerId);
    if (!budget) throw new NotFoundError('Budget');
    const now = new Date();
    return { ...budget, spent: await this.repository.spentSince(ownerId, budget.currency, monthStart(now)), resetsAt: nextMonthStart(now) };
  }

  async set(budget: Budget): Promise<BudgetStatus> {
    await this.repository.upsert(budget);
    this.spend.delete(budget.ownerId);
    return this.status(budget.ownerId);
  }

  async remove(ownerId: string): Promise<void> {
    if (!(await this.repository.remove(ownerId))) throw new NotFoundError('Budget');
    this.loadedAt = 0;
  }

  private async budgetOf(ownerId: string): Promise<Budget | undefined> {
    if (Date.now() - this.loadedAt > BUDGETS_TTL_MS) {
      this.loading ??= this.repository
        .listAll()
        .then((all) => {
          this.budgets = new Map(all.map((b) => [b.ownerId, b]));
          this.loadedAt = Date.now();
        })
        .finally(() => (this.loading = undefined));
      await this.loading;
    }
    return this.budgets.get(ownerId);
  }
}
