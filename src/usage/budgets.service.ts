import { Injectable, Optional } from '@nestjs/common';

import { DomainError, NotFoundError } from '../common/domain.errors.js';
import type { OperationSpec } from '../config/catalog.types.js';
import { PgNotifications } from '../database/pg-notifications.js';
import { PromptRenderError, renderPrompt } from '../providers/prompt.js';
import { estimateTokens } from '../providers/tokens.js';
import { type Budget, BUDGETS_CHANNEL, BudgetsRepository } from './budgets.repository.js';

/**
 * How stale the list of budgets may be on a replica that did not make the change while its LISTEN session is down
 * (a change NOTIFYs every replica otherwise). The spend itself is never cached: the create reads it under the
 * owner's budget row lock (JobsRepository.insertJob).
 */
const BUDGETS_TTL_MS = 10_000;

export class BudgetExceededError extends DomainError {
  constructor(budget: Omit<Budget, 'ownerId'>, used: number, resetsAt: Date) {
    super(
      'budget_exceeded',
      429,
      `The monthly budget of ${budget.monthlyLimit} ${budget.currency} cannot hold another job ` +
        `(${used} ${budget.currency} spent or held by live jobs this month). It resets at ${resetsAt.toISOString()}.`,
      [{ field: 'budget', message: `resets at ${resetsAt.toISOString()}` }],
    );
    this.retryAfterSeconds = Math.max(1, Math.ceil((resetsAt.getTime() - Date.now()) / 1000));
  }
}

export interface BudgetStatus extends Budget {
  spent: number;
  /** What live jobs may still cost: their worst case less what their attempts were priced at so far. */
  reserved: number;
  resetsAt: Date;
}

/**
 * The most tokens one attempt of `operation` on `input` may bill: the prompt, counted pessimistically, and
 * maxTokens.
 */
export function worstCaseTokens(
  operation: OperationSpec,
  input: Record<string, unknown>,
): { prompt: number; completion: number } {
  let prompt: number;
  try {
    prompt = estimateTokens(renderPrompt(operation, input));
  } catch (error) {
    // The attempt will fail before any call; reserve as if the whole input were sent, never nothing.
    if (!(error instanceof PromptRenderError)) throw error;
    prompt = estimateTokens({ user: JSON.stringify(input) });
  }
  return { prompt, completion: operation.maxTokens };
}

const monthStart = (now: Date) => new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1));
const nextMonthStart = (now: Date) => new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() + 1, 1));

/**
 * Optional monthly budgets per owner. The create path asks `hasBudget`: owners without a budget cost a map lookup
 * (the list is reloaded every 10 s); an owner with one has its create checked and its worst case reserved in the
 * create's transaction (docs/operations.md#budgets).
 */
@Injectable()
export class BudgetsService {
  private budgets = new Map<string, Budget>();
  private loadedAt = 0;
  private loading?: Promise<void>;
  private generation = 0;

  constructor(
    private readonly repository: BudgetsRepository,
    /** Absent in tools that build the module without a database session. */
    @Optional() notifications?: PgNotifications,
  ) {
    notifications?.subscribe(BUDGETS_CHANNEL, () => this.forget());
    notifications?.onStateChange(() => this.forget());
  }

  private forget(): void {
    this.generation++;
    this.loadedAt = 0;
  }

  /** Whether the owner's creates go through the budget check (as this replica last read the budgets). */
  async hasBudget(ownerId: string): Promise<boolean> {
    return (await this.budgetOf(ownerId)) !== undefined;
  }

  /** The refusal of a create the budget cannot hold, with the reset time. */
  exceeded(budget: Omit<Budget, 'ownerId'>, used: number): BudgetExceededError {
    return new BudgetExceededError(budget, used, nextMonthStart(new Date()));
  }

  async status(ownerId: string): Promise<BudgetStatus> {
    this.forget();
    const budget = await this.budgetOf(ownerId);
    if (!budget) throw new NotFoundError('Budget');
    const now = new Date();
    const { spent, reserved } = await this.repository.usedSince(ownerId, budget.currency, monthStart(now));
    return { ...budget, spent, reserved, resetsAt: nextMonthStart(now) };
  }

  async set(budget: Budget): Promise<BudgetStatus> {
    await this.repository.upsert(budget);
    return this.status(budget.ownerId);
  }

  async remove(ownerId: string): Promise<void> {
    if (!(await this.repository.remove(ownerId))) throw new NotFoundError('Budget');
    this.forget();
  }

  private async budgetOf(ownerId: string): Promise<Budget | undefined> {
    if (Date.now() - this.loadedAt > BUDGETS_TTL_MS) {
      const generation = this.generation;
      this.loading ??= this.repository
        .listAll()
        .then((all) => {
          this.budgets = new Map(all.map((b) => [b.ownerId, b]));
          // A change announced while this read was under way may be missing from it: read again next time.
          if (generation === this.generation) this.loadedAt = Date.now();
        })
        .finally(() => (this.loading = undefined));
      await this.loading;
    }
    return this.budgets.get(ownerId);
  }
}
