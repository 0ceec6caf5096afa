import { ApiProperty, ApiPropertyOptional } from '@nestjs/swagger';

import { CURSOR } from '../common/page-query.dto.js';
import {
  type Batch,
  type BatchItem,
  type BatchProgress,
  ITEM_OUTCOMES,
  type ListedBatchItem,
} from '../ledger/batch.types.js';
import { JOB_STATUSES } from '../ledger/job.types.js';

const count = () => ApiProperty({ type: 'integer', minimum: 0 });

export class BatchCountsView {
  @count() pending!: number;
  @count() running!: number;
  @count() unknown!: number;
  @count() succeeded!: number;
  @count() failed!: number;
  @count() cancelled!: number;
  @ApiProperty({
    type: 'integer',
    minimum: 0,
    description: 'Items whose key names a job of another intent: no job of this batch.',
  })
  conflict!: number;
}

export class BatchCostView {
  @ApiProperty({ description: 'ISO 4217.' }) currency!: string;
  @ApiProperty({ description: "Every attempt of the batch's jobs, rounded to 8 decimals." }) total!: number;
}

/** The fields every view of a batch has. */
export class BatchSummaryView {
  @ApiProperty({ format: 'uuid' }) id!: string;
  @ApiProperty({ minLength: 1, maxLength: 255, pattern: '^[\\x21-\\x7e]+$', example: 'import-2026-12-01' })
  idempotencyKey!: string;
  @ApiProperty({ enum: ['running', 'completed'], description: 'completed once every job of the batch is terminal.' })
  status!: string;
  @ApiProperty({ type: 'integer', minimum: 1, maximum: 10_000 }) itemCount!: number;
  @ApiProperty({ type: 'integer', minimum: 0, description: 'Jobs of the batch not yet terminal.' }) liveJobs!: number;
  @ApiProperty({ type: 'object', nullable: true, additionalProperties: true })
  metadata!: Record<string, unknown> | null;
  @ApiProperty({ type: 'integer', minimum: -1000, maximum: 1000 }) priority!: number;
  @ApiProperty({ format: 'date-time' }) createdAt!: string;
  @ApiProperty({ format: 'date-time', nullable: true, type: String, description: 'When the last job became terminal.' })
  completedAt!: string | null;
}

export class BatchView extends BatchSummaryView {
  @ApiProperty({ type: BatchCountsView, description: "The batch's jobs per status now, and its conflicts." })
  counts!: BatchCountsView;
  @ApiProperty({ type: [BatchCostView], description: "The cost of every attempt of the batch's jobs, per currency." })
  cost!: BatchCostView[];
}

export class BatchItemView {
  @ApiProperty({ type: 'integer', minimum: 0, description: "The item's index in the request." }) index!: number;
  @ApiProperty({ minLength: 1, maxLength: 255 }) key!: string;
  @ApiProperty({
    enum: ITEM_OUTCOMES,
    description:
      'created: a new job. replayed: the key already named a job of the same intent, and that job is this item. ' +
      'conflict: the key names a job of another intent (idempotency_key_reused); that job is untouched and ' +
      'not in the batch.',
  })
  outcome!: string;
  @ApiPropertyOptional({
    enum: ['idempotency_key_reused'],
    description: "A conflict's code, as POST /v1/jobs's 409 under the same key; absent on other items.",
  })
  code?: 'idempotency_key_reused';
  @ApiProperty({
    format: 'uuid',
    nullable: true,
    type: String,
    description:
      "The item's job. For a conflict, the owner's job its key names: another intent, untouched and no member of " +
      'the batch (null only for a conflict recorded before this was kept).',
  })
  jobId!: string | null;
}

export class BatchCreatedView extends BatchView {
  @ApiProperty({ type: [BatchItemView], description: 'Every item, in the order sent.' }) items!: BatchItemView[];
}

export class BatchJobView extends BatchItemView {
  @ApiProperty({
    enum: [...JOB_STATUSES, null],
    nullable: true,
    type: String,
    description: "The job's status now; null for a conflict (its job is no member of the batch).",
  })
  status!: string | null;
  @ApiProperty({ type: 'integer', nullable: true, minimum: 0 }) version!: number | null;
  @ApiProperty({ format: 'date-time', nullable: true, type: String }) completedAt!: string | null;
}

export class BatchJobPageView {
  @ApiProperty({ type: [BatchJobView] }) items!: BatchJobView[];
  @ApiProperty({ nullable: true, type: String, pattern: CURSOR.source, description: 'Null on the last page.' })
  nextCursor!: string | null;
}

export class BatchPageView {
  @ApiProperty({ type: [BatchSummaryView] }) items!: BatchSummaryView[];
  @ApiProperty({ nullable: true, type: String, pattern: CURSOR.source, description: 'Null on the last page.' })
  nextCursor!: string | null;
}

const iso = (date: Date | null) => (date ? date.toISOString() : null);
const round8 = (n: number) => Math.round(n * 1e8) / 1e8;

export function toBatchSummaryView(batch: Batch): BatchSummaryView {
  return {
    id: batch.id,
    idempotencyKey: batch.idempotencyKey,
    status: batch.completedAt ? 'completed' : 'running',
    itemCount: batch.itemCount,
    liveJobs: batch.liveJobs,
    metadata: batch.metadata,
    priority: batch.priority,
    createdAt: batch.createdAt.toISOString(),
    completedAt: iso(batch.completedAt),
  };
}

export function toBatchView(batch: BatchProgress): BatchView {
  return {
    ...toBatchSummaryView(batch),
    counts: { ...batch.counts, conflict: batch.conflicts },
    cost: batch.cost.map((c) => ({ currency: c.currency, total: round8(Number(c.amount)) })),
  };
}

export const toBatchItemView = (item: BatchItem): BatchItemView => ({
  index: item.index,
  key: item.key,
  outcome: item.outcome,
  ...(item.outcome === 'conflict' ? { code: 'idempotency_key_reused' as const } : {}),
  jobId: item.jobId,
});

export function toBatchJobView(item: ListedBatchItem): BatchJobView {
  return { ...toBatchItemView(item), status: item.status, version: item.version, completedAt: iso(item.completedAt) };
}
