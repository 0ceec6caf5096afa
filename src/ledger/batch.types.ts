import type { JobStatus } from './job.types.js';

export const ITEM_OUTCOMES = ['created', 'replayed', 'conflict'] as const;
/** What became of one item: a new job, an existing job of the same intent, or a key bound to another intent. */
export type ItemOutcome = (typeof ITEM_OUTCOMES)[number];

export interface Batch {
  id: string;
  ownerId: string;
  idempotencyKey: string;
  fingerprint: string;
  metadata: Record<string, unknown> | null;
  priority: number;
  itemCount: number;
  /** The jobs its items name (created or replayed; a conflict names none), as the batch row records it. */
  members: number;
  /** Member jobs not yet terminal; 0 once the batch is complete. */
  liveJobs: number;
  createdAt: Date;
  completedAt: Date | null;
}

/** A batch with its progress, read in one query: jobs per status, conflicts, the cost of every attempt. */
export interface BatchProgress extends Batch {
  counts: Record<JobStatus, number>;
  conflicts: number;
  cost: Array<{ currency: string; amount: string }>;
}

export interface BatchItem {
  index: number;
  key: string;
  outcome: ItemOutcome;
  /**
   * The item's job; for a conflict, the job its key names, of another intent and no member of the batch (null only
   * for a conflict recorded before batch_items kept it).
   */
  jobId: string | null;
}

/** An item of a batch page: the item and its job's state now. */
export interface ListedBatchItem extends BatchItem {
  status: JobStatus | null;
  version: number | null;
  completedAt: Date | null;
}

export interface BatchRow {
  id: string;
  owner_id: string;
  idempotency_key: string;
  fingerprint: string;
  metadata: Record<string, unknown> | null;
  priority: number;
  item_count: number;
  members: number;
  live_jobs: number;
  created_at: Date;
  completed_at: Date | null;
}

export interface BatchProgressRow extends BatchRow {
  counts: Partial<Record<JobStatus, number>> | null;
  conflicts: number;
  cost: Array<{ currency: string; amount: string }> | null;
}

export function batchFromRow(row: BatchRow): Batch {
  return {
    id: row.id,
    ownerId: row.owner_id,
    idempotencyKey: row.idempotency_key,
    fingerprint: row.fingerprint,
    metadata: row.metadata ?? null,
    priority: row.priority,
    itemCount: row.item_count,
    members: row.members,
    liveJobs: row.live_jobs,
    createdAt: row.created_at,
    completedAt: row.completed_at ?? null,
  };
}

export function batchProgressFromRow(row: BatchProgressRow): BatchProgress {
  const counts = row.counts ?? {};
  return {
    ...batchFromRow(row),
    counts: {
      pending: counts.pending ?? 0,
      running: counts.running ?? 0,
      unknown: counts.unknown ?? 0,
      succeeded: counts.succeeded ?? 0,
      failed: counts.failed ?? 0,
      cancelled: counts.cancelled ?? 0,
    },
    conflicts: row.conflicts,
    cost: row.cost ?? [],
  };
}
