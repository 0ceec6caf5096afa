import { Injectable } from '@nestjs/common';
import { DataSource } from 'typeorm';

import { type Queryable, rowsOf } from '../database/transactions.js';
import {
  type Batch,
  batchFromRow,
  type BatchItem,
  type BatchProgress,
  batchProgressFromRow,
  type BatchProgressRow,
  type BatchRow,
  type ItemOutcome,
  type ListedBatchItem,
} from './batch.types.js';
import type { JobStatus } from './job.types.js';

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

const BATCH_COLUMNS = `b.id, b.owner_id, b.idempotency_key, b.fingerprint, b.metadata, b.priority, b.item_count,
  b.live_jobs, b.created_at, b.completed_at`;

/** A batch's progress in one query: its members' jobs per status, its conflicts, the cost of every attempt. */
const PROGRESS_COLUMNS = `${BATCH_COLUMNS},
  (SELECT json_object_agg(s.status, s.n) FROM (
     SELECT j.status, count(*)::int AS n FROM batch_items i JOIN jobs j ON j.id = i.job_id
      WHERE i.batch_id = b.id GROUP BY j.status) s) AS counts,
  (SELECT count(*)::int FROM batch_items i WHERE i.batch_id = b.id AND i.outcome = 'conflict') AS conflicts,
  (SELECT json_agg(json_build_object('currency', c.currency, 'amount', c.amount::text) ORDER BY c.currency) FROM (
     SELECT a.cost_currency AS currency, sum(a.cost) AS amount FROM batch_items i JOIN attempts a ON a.job_id = i.job_id
      WHERE i.batch_id = b.id AND a.cost IS NOT NULL GROUP BY a.cost_currency) c) AS cost`;

/**
 * The batch's own key: a second request with the same owner and key finds it taken and waits for the first one's
 * transaction, then gets no row (DO NOTHING), and answers the replay or the 409 from the stored batch.
 */
const INSERT_BATCH = `INSERT INTO batches
  (owner_id, idempotency_key, fingerprint, metadata, priority, item_count, live_jobs)
VALUES ($1, $2, $3, $4::jsonb, $5, $6, $6)
ON CONFLICT ON CONSTRAINT "UQ_batches_owner_idempotency_key" DO NOTHING
RETURNING ${BATCH_COLUMNS.replace(/\bb\./g, '')}`;

/**
 * Every item's job in one statement, with its `created` event and its membership: a key that exists already is
 * skipped (ON CONFLICT on the owner-and-key constraint only), and read afterwards by LOCK_EXISTING. Rows go in in
 * key order, as single creates do, so statements sharing keys wait on each other in one order. A budgeted owner's
 * jobs ($4 set) reserve their worst case at the chain's dearest price, as JobsRepository's budgeted create does.
 * `priority` (the batch's) is each job's own priority (fair share, docs/design.md#fair-share).
 */
const INSERT_BATCH_JOBS = `WITH x AS MATERIALIZED (
    SELECT * FROM jsonb_to_recordset($1::jsonb) AS x(ord int, idempotency_key text, fingerprint text, operation text,
      input jsonb, providers text[], waiting_for text, priority int, prompt_tokens int, completion_tokens int)
  ), j AS (
    INSERT INTO jobs (owner_id, idempotency_key, fingerprint, operation, input, providers, trace_context, waiting_for,
                      priority, reserved_cost, reserved_currency)
    SELECT $2, x.idempotency_key, x.fingerprint, x.operation, x.input, x.providers, $5, x.waiting_for, x.priority,
           CASE WHEN $4::text IS NOT NULL THEN
             (SELECT COALESCE(max(round((x.prompt_tokens * p.input_per_mtok + x.completion_tokens * p.output_per_mtok)
                                        / 1000000, 8)), 0)
                FROM provider_prices p WHERE p.provider = ANY (x.providers) AND p.currency = $4) END,
           $4
      FROM x ORDER BY x.idempotency_key
    ON CONFLICT ON CONSTRAINT "UQ_jobs_owner_idempotency_key" DO NOTHING
    RETURNING id, idempotency_key
  ), e AS (
    INSERT INTO job_events (job_id, subject, from_status, to_status, reason)
    SELECT id, 'job', NULL, 'pending', 'created' FROM j
  ), m AS (
    INSERT INTO batch_items (batch_id, ord, idempotency_key, job_id, outcome)
    SELECT $3, x.ord, x.idempotency_key, j.id, 'created' FROM j JOIN x ON x.idempotency_key = j.idempotency_key
  )
  SELECT x.ord, j.id FROM j JOIN x ON x.idempotency_key = j.idempotency_key`;

/**
 * The jobs the keys skipped by INSERT_BATCH_JOBS name, share-locked in id order: a settlement of one of them (which
 * locks it FOR UPDATE) either committed before this read, and its status is read here, or waits for the batch to
 * commit, and then finds the batch's membership and counts the job down (the trigger of migration CreateBatches).
 */
const LOCK_EXISTING = `SELECT j.id, j.idempotency_key, j.fingerprint, j.status FROM jobs j
  WHERE j.owner_id = $1 AND j.idempotency_key = ANY ($2::text[]) ORDER BY j.id FOR SHARE`;

/** The items that did not create a job, and the batch's count of live members. */
const FINISH_BATCH = `WITH m AS (
    INSERT INTO batch_items (batch_id, ord, idempotency_key, job_id, outcome)
    SELECT $1, o.ord, o.idempotency_key, o.job_id, o.outcome
      FROM unnest($2::int[], $3::text[], $4::uuid[], $5::text[]) AS o(ord, idempotency_key, job_id, outcome)
  )
  UPDATE batches SET live_jobs = $6, completed_at = CASE WHEN $6 = 0 THEN now() END WHERE id = $1
  RETURNING ${BATCH_COLUMNS.replace(/\bb\./g, '')}`;

/** The budget row of an owner, locked: every replica's budgeted creates of that owner queue on it. */
const LOCK_BUDGET = `SELECT monthly_limit, currency FROM owner_budgets WHERE owner_id = $1 FOR UPDATE`;

/**
 * Under the budget lock: what the owner spent this month plus what its live jobs still hold (as
 * INSERT_JOBS_WITHIN_BUDGET of jobs.repository.ts counts it), and the worst case of the batch's new jobs. The batch
 * is admitted whole when its last new job would be admitted as a single create is (what is ahead of it below the
 * limit), or refused whole.
 */
const BUDGET_CHECK = `WITH x AS (
    SELECT * FROM jsonb_to_recordset($1::jsonb) AS x(ord int, idempotency_key text, providers text[],
      prompt_tokens int, completion_tokens int)
  ), fresh AS (
    SELECT x.ord,
           (SELECT COALESCE(max(round((x.prompt_tokens * p.input_per_mtok
                                       + x.completion_tokens * p.output_per_mtok) / 1000000, 8)), 0)
              FROM provider_prices p WHERE p.provider = ANY (x.providers) AND p.currency = $3) AS cost
      FROM x WHERE NOT EXISTS (SELECT 1 FROM jobs k WHERE k.owner_id = $2 AND k.idempotency_key = x.idempotency_key)
  )
  SELECT (SELECT COALESCE(sum(a.cost), 0) FROM jobs j JOIN attempts a ON a.job_id = j.id
           WHERE j.owner_id = $2 AND a.cost_currency = $3 AND a.started_at >= date_trunc('month', now(), 'UTC'))
       + (SELECT COALESCE(sum(GREATEST(j.reserved_cost - COALESCE(
                    (SELECT sum(a.cost) FROM attempts a WHERE a.job_id = j.id AND a.cost_currency = $3), 0), 0)), 0)
            FROM jobs j
           WHERE j.owner_id = $2 AND j.status IN ('pending', 'running', 'unknown') AND j.reserved_currency = $3)
         AS used,
         (SELECT COALESCE(sum(cost), 0) FROM fresh) AS total,
         (SELECT cost FROM fresh ORDER BY ord DESC LIMIT 1) AS last`;

interface BatchItemRow {
  ord: number;
  idempotency_key: string;
  outcome: ItemOutcome;
  job_id: string | null;
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
    const rows = await rowsOf<BatchRow>(manager, INSERT_BATCH, [
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
    const [row] = await rowsOf<{ used: string; total: string; last: string | null }>(manager, BUDGET_CHECK, [
      records,
      ownerId,
      budget.currency,
    ]);
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
    const rows = await rowsOf<{ ord: number; id: string }>(manager, INSERT_BATCH_JOBS, [
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
    const rows = await rowsOf<{ id: string; idempotency_key: string; fingerprint: string; status: JobStatus }>(
      manager,
      LOCK_EXISTING,
      [ownerId, keys],
    );
    return rows.map((r) => ({
      id: r.id,
      idempotencyKey: r.idempotency_key,
      fingerprint: r.fingerprint,
      status: r.status,
    }));
  }

  /** The items that created no job, and the count of the batch's live members (0: complete at once). */
  async finish(batchId: string, items: BatchItem[], liveJobs: number, manager: Queryable): Promise<Batch> {
    const [row] = await rowsOf<BatchRow>(manager, FINISH_BATCH, [
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
    const [row] = await rowsOf<{ n: number }>(manager, 'SELECT announce_batch_completed($1) AS n', [batchId]);
    return row.n;
  }

  async findByKey(ownerId: string, idempotencyKey: string): Promise<Batch | undefined> {
    const rows = await rowsOf<BatchRow>(
      this.dataSource.manager,
      `SELECT ${BATCH_COLUMNS} FROM batches b WHERE b.owner_id = $1 AND b.idempotency_key = $2`,
      [ownerId, idempotencyKey],
    );
    return rows[0] && batchFromRow(rows[0]);
  }

  /** A batch with its progress; `ownerId` null reads any owner's (ops:read). */
  async findProgress(id: string, ownerId: string | null): Promise<BatchProgress | undefined> {
    const rows = await rowsOf<BatchProgressRow>(
      this.dataSource.manager,
      `SELECT ${PROGRESS_COLUMNS} FROM batches b WHERE b.id = $1 AND ($2::text IS NULL OR b.owner_id = $2)`,
      [id, ownerId],
    );
    return rows[0] && batchProgressFromRow(rows[0]);
  }

  /**
   * The newest stream id of each of these batches (the live streams' sweep; ids that name no batch are skipped):
   * its jobs plus one once it is complete, else its terminal jobs (BatchProgressSource's ids).
   */
  async latestStreamIds(ids: string[]): Promise<Map<string, string>> {
    const rows = await rowsOf<{ id: string; latest: string }>(
      this.dataSource.manager,
      `SELECT b.id, (CASE WHEN b.completed_at IS NOT NULL THEN count(j.id) + 1
                          ELSE count(j.id) FILTER (WHERE j.status IN ('succeeded', 'failed',
                            'cancelled')) END)::text AS latest
         FROM batches b LEFT JOIN batch_items i ON i.batch_id = b.id LEFT JOIN jobs j ON j.id = i.job_id
        WHERE b.id = ANY ($1::uuid[])
        GROUP BY b.id`,
      [ids],
    );
    return new Map(rows.map((r) => [r.id, r.latest]));
  }

  /** Every item of a batch, in order: the answer a replay repeats. */
  async items(batchId: string): Promise<BatchItem[]> {
    const rows = await rowsOf<BatchItemRow>(
      this.dataSource.manager,
      'SELECT ord, idempotency_key, outcome, job_id FROM batch_items WHERE batch_id = $1 ORDER BY ord',
      [batchId],
    );
    return rows.map(itemFromRow);
  }

  /** A page of a batch's items in index order with their jobs' state, keyset on the index. */
  async listItems(batchId: string, query: BatchItemPageQuery): Promise<ListedBatchItem[]> {
    const rows = await rowsOf<{
      ord: number;
      idempotency_key: string;
      outcome: ItemOutcome;
      job_id: string | null;
      status: JobStatus | null;
      version: number | null;
      completed_at: Date | null;
    }>(
      this.dataSource.manager,
      `SELECT i.ord, i.idempotency_key, i.outcome, i.job_id, j.status, j.version, j.completed_at
         FROM batch_items i LEFT JOIN jobs j ON j.id = i.job_id
        WHERE i.batch_id = $1 AND i.ord > $2 AND ($3::text IS NULL OR j.status = $3)
        ORDER BY i.ord LIMIT $4`,
      [batchId, query.afterIndex ?? -1, query.status ?? null, query.limit],
    );
    return rows.map((r) => ({ ...itemFromRow(r), status: r.status, version: r.version, completedAt: r.completed_at }));
  }

  /** The owner's batches, newest first, keyset on (created_at, id); undefined when the cursor is not the owner's. */
  async listOwned(ownerId: string, query: BatchPageQuery): Promise<Batch[] | undefined> {
    if (query.afterId) {
      const cursor = await this.dataSource.query('SELECT 1 FROM batches WHERE id = $1 AND owner_id = $2', [
        query.afterId,
        ownerId,
      ]);
      if (!cursor.length) return undefined;
    }
    const rows = await rowsOf<BatchRow>(
      this.dataSource.manager,
      `SELECT ${BATCH_COLUMNS} FROM batches b
        WHERE b.owner_id = $1
          AND ($3::uuid IS NULL OR (b.created_at, b.id) < (SELECT c.created_at, c.id FROM batches c WHERE c.id = $3))
        ORDER BY b.created_at DESC, b.id DESC LIMIT $2`,
      [ownerId, query.limit, query.afterId ?? null],
    );
    return rows.map(batchFromRow);
  }

  /** The ids of the batch's jobs that are not terminal, in id order (the order the cancel locks them in). */
  async liveJobIds(batchId: string): Promise<string[]> {
    const rows = await rowsOf<{ id: string }>(
      this.dataSource.manager,
      `SELECT j.id FROM batch_items i JOIN jobs j ON j.id = i.job_id
        WHERE i.batch_id = $1 AND j.status IN ('pending', 'running', 'unknown') ORDER BY j.id`,
      [batchId],
    );
    return rows.map((r) => r.id);
  }
}
