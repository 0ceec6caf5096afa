import { Injectable } from '@nestjs/common';
import { DataSource } from 'typeorm';

import { DomainError } from '../common/domain.errors.js';
import { inTransaction } from '../database/transactions.js';
import type { Batch, BatchItem } from './batch.types.js';
import { BatchesRepository, type NewBatch, type NewBatchJob } from './batches.repository.js';
import { isTerminal } from './job.types.js';
import { OverBudgetError } from './ledger.errors.js';

export interface WrittenBatch {
  batch: Batch;
  items: BatchItem[];
  /** Jobs the batch created (the rest replayed or conflict). */
  created: number;
  /** `batch.completed` deliveries written (every job of the batch terminal already). */
  announced: number;
}

/**
 * A batch's write, the ledger's (docs/design.md#batches): its row, its jobs, the items that replayed or conflict, its
 * count of live jobs, in one transaction of a few statements whatever the size. Undefined when the batch's key is
 * taken (the caller replays); OverBudgetError when the owner's budget cannot hold the whole batch.
 */
@Injectable()
export class BatchWriter {
  constructor(
    private readonly dataSource: DataSource,
    private readonly batches: BatchesRepository,
  ) {}

  async write(fresh: NewBatch, jobs: NewBatchJob[], traceContext: string | null): Promise<WrittenBatch | undefined> {
    const budgeted = jobs.some((job) => job.worstCaseTokens !== undefined);
    return inTransaction(this.dataSource, async (manager) => {
      const batch = await this.batches.insertBatch(fresh, manager);
      if (!batch) return undefined;
      const budget = budgeted ? await this.batches.lockBudget(fresh.ownerId, manager) : undefined;
      if (budget) {
        const { admitted, used } = await this.batches.checkBudget(fresh.ownerId, jobs, budget, manager);
        // The whole batch or none of it: the rollback takes the batch row too.
        if (!admitted) throw new OverBudgetError(budget.limit, budget.currency, used);
      }
      const created = await this.batches.insertJobs(
        fresh.ownerId,
        batch,
        jobs,
        { currency: budget?.currency ?? null, traceContext },
        manager,
      );
      const skipped = jobs.filter((job) => !created.has(job.ord));
      const found = skipped.length
        ? await this.batches.lockExisting(
            fresh.ownerId,
            skipped.map((j) => j.idempotencyKey),
            manager,
          )
        : [];
      const existing = new Map(found.map((j) => [j.idempotencyKey, j]));
      let live = created.size;
      const rest: BatchItem[] = skipped.map((job) => {
        const named = existing.get(job.idempotencyKey);
        // The key was taken when the INSERT skipped it; only the retention purge can have removed it since.
        if (!named) throw new DomainError('service_unavailable', 503, 'A job of the batch was purged just now; retry.');
        const item = { index: job.ord, key: job.idempotencyKey };
        if (named.fingerprint !== job.fingerprint) return { ...item, outcome: 'conflict', jobId: named.id };
        if (!isTerminal(named.status)) live++;
        return { ...item, outcome: 'replayed', jobId: named.id };
      });
      const finished = await this.batches.finish(batch.id, rest, live, manager);
      const announced = live === 0 ? await this.batches.announceCompleted(batch.id, manager) : 0;
      const byIndex = new Map(rest.map((item) => [item.index, item]));
      const items: BatchItem[] = jobs.map((job) => {
        const jobId = created.get(job.ord) ?? null;
        const own: BatchItem = { index: job.ord, key: job.idempotencyKey, outcome: 'created', jobId };
        return byIndex.get(job.ord) ?? own;
      });
      return { batch: finished, items, created: created.size, announced };
    });
  }
}
