import { Injectable } from '@nestjs/common';
import { DataSource } from 'typeorm';

import { type Queryable, rowsOf } from '../database/transactions.js';
import {
  type Batch,
  batchFromRow,
  type BatchItem,
  type BatchProgress,
  batchProgressFromRow,
  type ListedBatchItem,
} from './batch.types.js';
import {
  ALL_ITEMS,
  ANNOUNCE_COMPLETED,
  BATCH_CURSOR,
  type BatchItemRow,
  BUDGET_CHECK,
  FIND_OWNED_BY_KEY,
  FIND_PROGRESS,
  FINISH_BATCH,
  INSERT_BATCH,
  INSERT_BATCH_JOBS,
  LATEST_STREAM_IDS,
  LIST_ITEMS,
  LIST_OWNED,
  LIVE_JOB_IDS,
  LOCK_EXISTING,
} from './batches.sql.js';
import type { JobStatus } from './job.types.js';
import { LOCK_BUDGET } from './jobs.sql.js';

export interface NewBatch {
  ownerId: string;
  idempotencyKey: string;
  fingerprint: string;
  metadata: Record<string, unknown> | null;
  priority: number;
  itemCount: number;
}

/** One item's job, as the batch's single INSERT of jobs takes it; `inputJson` is the input serialised once. */
export interface NewBatchJob {
  ord: number;
  idempotencyKey: string;
  fingerprint: string;
  operation: string;
  inputJson: string;
  providers: string[];
  waitingFor: string | null;
  /** Set when the owner has a budget: the most tokens one attempt of this job may bill. */
  worstCaseTokens?: { prompt: number; completion: number };
}

/** A job an item's key named already, read under a share lock: its status cannot change before the batch commits. */
export interface ExistingJob {
  id: string;
  idempotencyKey: string;
  fingerprint: string;
  status: JobStatus;
}

export interface BatchItemPageQuery {
  status?: JobStatus;
  limit: number;
  /** The index of the last item of the previous page. */
  afterIndex?: number;
}

export interface BatchPageQuery {
  limit: number;
  afterId?: string;
}

const itemFromRow = (row: BatchItemRow): BatchItem => ({
  index: row.ord,
  key: row.idempotency_key,
  outcome: row.outcome,
  jobId: row.job_id,
});

/** One JSON array of the jobs' records; each input goes in as serialised, not a second time. */
function recordsOf(jobs: NewBatchJob[], priority: number): string {
  const records = jobs.map((job) => {
    const fields = JSON.stringify({
      ord: job.ord,
      idempotency_key: job.idempotencyKey,
      fingerprint: job.fingerprint,
      operation: job.operation,
      providers: job.providers,
      waiting_for: job.waitingFor,
      priority,
      prompt_tokens: job.worstCaseTokens?.prompt ?? 0,
      completion_tokens: job.worstCaseTokens?.completion ?? 0,
    });
    return `${fields.slice(0, -1)},"input":${job.inputJson}}`;
  });
  return `[${records.join(',')}]`;
}

/**
 * Batches and their items (docs/design.md#batches). The write is a few statements whatever the size of the batch,
 * on the caller's transaction; reads take the owner (I7), or none for an operator's `ops:read`.
 */
@Injectable()
export class BatchesRepository {
  constructor(private readonly dataSource: DataSource) {}

  /** The batch row, or undefined when the owner's key is taken (by a batch committed before this returns). */
  async insertBatch(batch: NewBatch, manager: Queryable): Promise<Batch | undefined> {
    const rows = await rowsOf(manager, INSERT_BATCH, [
      batch.ownerId,
      batch.idempotencyKey,
      batch.fingerprint,
      batch.metadata === null ? null : JSON.stringify(batch.metadata),
      batch.priority,
      batch.itemCount,
    ]);
    return rows[0] && batchFromRow(rows[0]);
  }

  /** The owner's budget row, locked until the transaction ends; undefined when the owner has none. */
  async lockBudget(ownerId: string, manager: Queryable): Promise<{ limit: number; currency: string } | undefined> {
    const [row] = await rowsOf<{ monthly_limit: string; currency: string }>(manager, LOCK_BUDGET, [ownerId]);
    return row && { limit: Number(row.monthly_limit), currency: row.currency };
  }

  /** Under lockBudget: the owner's use now, and whether the batch's new jobs fit (all of them, or none). */
  async checkBudget(
    ownerId: string,
    jobs: NewBatchJob[],
    budget: { limit: number; currency: string },
    manager: Queryable,
  ): Promise<{ admitted: boolean; used: number }> {
    const records = JSON.stringify(
      jobs.map((job) => ({
        ord: job.ord,
        idempotency_key: job.idempotencyKey,
        providers: job.providers,
        prompt_tokens: job.worstCaseTokens?.prompt ?? 0,
        completion_tokens: job.worstCaseTokens?.completion ?? 0,
      })),
    );
    const [row] = await rowsOf(manager, BUDGET_CHECK, [records, ownerId, budget.currency]);
    const used = Number(row.used);
    const admitted = row.last === null || used + Number(row.total) - Number(row.last) < budget.limit;
    return { admitted, used };
  }

  /** Inserts every job whose key is free, with its event and membership; returns the created ids by item index. */
  async insertJobs(
    ownerId: string,
    batch: Batch,
    jobs: NewBatchJob[],
    options: { currency: string | null; traceContext: string | null },
    manager: Queryable,
  ): Promise<Map<number, string>> {
    const rows = await rowsOf(manager, INSERT_BATCH_JOBS, [
      recordsOf(jobs, batch.priority),
      ownerId,
      batch.id,
      options.currency,
      options.traceContext,
    ]);
    return new Map(rows.map((row) => [row.ord, row.id]));
  }

  /** The owner's jobs under these keys, share-locked in id order (LOCK_EXISTING). */
  async lockExisting(ownerId: string, keys: string[], manager: Queryable): Promise<ExistingJob[]> {
    const rows = await rowsOf(manager, LOCK_EXISTING, [ownerId, keys]);
    return rows.map((r) => ({
      id: r.id,
      idempotencyKey: r.idempotency_key,
      fingerprint: r.fingerprint,
      status: r.status,
    }));
  }

  /** The items that created no job, and the count of the batch's live members (0: complete at once). */
  async finish(batchId: string, items: BatchItem[], liveJobs: number, manager: Queryable): Promise<Batch> {
    const [row] = await rowsOf(manager, FINISH_BATCH, [
      batchId,
      items.map((i) => i.index),
      items.map((i) => i.key),
      items.map((i) => i.jobId),
      items.map((i) => i.outcome),
      liveJobs,
    ]);
    return batchFromRow(row);
  }

  /** A batch whose every job was terminal when it was written: its announcement, in the same transaction. */
  async announceCompleted(batchId: string, manager: Queryable): Promise<number> {
    const [row] = await rowsOf(manager, ANNOUNCE_COMPLETED, [batchId]);
    return row.n;
  }

  async findByKey(ownerId: string, idempotencyKey: string): Promise<Batch | undefined> {
    const rows = await rowsOf(this.dataSource.manager, FIND_OWNED_BY_KEY, [ownerId, idempotencyKey]);
    return rows[0] && batchFromRow(rows[0]);
  }

  /** A batch with its progress; `ownerId` null reads any owner's (ops:read). */
  async findProgress(id: string, ownerId: string | null): Promise<BatchProgress | undefined> {
    const rows = await rowsOf(this.dataSource.manager, FIND_PROGRESS, [id, ownerId]);
    return rows[0] && batchProgressFromRow(rows[0]);
  }

  /**
   * The newest stream id of each of these batches (the live streams' sweep; ids that name no batch are skipped):
   * its jobs plus one once it is complete, else its terminal jobs (BatchProgressSource's ids).
   */
  async latestStreamIds(ids: string[]): Promise<Map<string, string>> {
    const rows = await rowsOf(this.dataSource.manager, LATEST_STREAM_IDS, [ids]);
    return new Map(rows.map((r) => [r.id, r.latest]));
  }

  /** Every item of a batch, in order: the answer a replay repeats. */
  async items(batchId: string): Promise<BatchItem[]> {
    const rows = await rowsOf(this.dataSource.manager, ALL_ITEMS, [batchId]);
    return rows.map(itemFromRow);
  }

  /** A page of a batch's items in index order with their jobs' state, keyset on the index. */
  async listItems(batchId: string, query: BatchItemPageQuery): Promise<ListedBatchItem[]> {
    const rows = await rowsOf(this.dataSource.manager, LIST_ITEMS, [
      batchId,
      query.afterIndex ?? -1,
      query.status ?? null,
      query.limit,
    ]);
    return rows.map((r) => ({ ...itemFromRow(r), status: r.status, version: r.version, completedAt: r.completed_at }));
  }

  /** The owner's batches, newest first, keyset on (created_at, id); undefined when the cursor is not the owner's. */
  async listOwned(ownerId: string, query: BatchPageQuery): Promise<Batch[] | undefined> {
    if (query.afterId) {
      const cursor = await rowsOf(this.dataSource.manager, BATCH_CURSOR, [query.afterId, ownerId]);
      if (!cursor.length) return undefined;
    }
    const rows = await rowsOf(this.dataSource.manager, LIST_OWNED, [ownerId, query.limit, query.afterId ?? null]);
    return rows.map(batchFromRow);
  }

  /** The ids of the jobs the batch created that are not terminal, in id order (the order the cancel locks them in). */
  async liveCreatedJobIds(batchId: string): Promise<string[]> {
    const rows = await rowsOf(this.dataSource.manager, LIVE_JOB_IDS, [batchId]);
    return rows.map((r) => r.id);
  }
}
