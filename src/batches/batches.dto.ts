import { ApiProperty, ApiPropertyOptional } from '@nestjs/swagger';
import { IsIn, IsOptional, IsString } from 'class-validator';

import { AccessTokenQuery } from '../auth/access-token.query.js';
import { EVENT_ID_PATTERN, IsEventId, MAX_EVENT_ID } from '../common/event-ids.js';
import { PageQueryDto } from '../common/page-query.dto.js';
import { JOB_STATUSES, type JobStatus } from '../ledger/job.types.js';
import { MAX_BATCH_ITEMS, MAX_METADATA_BYTES, MAX_PRIORITY, MIN_PRIORITY } from './batch-validation.js';

/**
 * The body of POST /v1/batches, for the document only: it is validated whole by validateBatch (batch-validation.ts),
 * which names each error's item index, not by class-validator (10,000 nested objects cost it a second of CPU).
 */
export class CreateBatchItemDto {
  @ApiProperty({
    description: "This item's job's idempotency key, in the owner's key space (as a POST /v1/jobs Idempotency-Key).",
    minLength: 1,
    maxLength: 255,
    pattern: '^[\\x21-\\x7e]+$',
    example: 'doc-0001',
  })
  key!: string;

  @ApiProperty({
    description: 'Name of an operation of the catalog.',
    example: 'summarize',
    minLength: 1,
    maxLength: 100,
  })
  operation!: string;

  @ApiProperty({
    description: "The operation's input, validated against its input schema.",
    type: 'object',
    additionalProperties: true,
    example: { text: 'The quick brown fox jumps over the lazy dog.' },
  })
  input!: Record<string, unknown>;

  @ApiPropertyOptional({
    description: "Ordered provider chain, primary first. Omitted: the operation's default chain.",
    type: 'array',
    items: { type: 'string', minLength: 1, maxLength: 100 },
    minItems: 1,
    maxItems: 10,
    uniqueItems: true,
  })
  providers?: string[];
}

export class CreateBatchDto {
  @ApiProperty({
    type: [CreateBatchItemDto],
    minItems: 1,
    maxItems: MAX_BATCH_ITEMS,
    description: 'Each item is one job; keys are unique within the batch.',
  })
  items!: CreateBatchItemDto[];

  @ApiPropertyOptional({
    type: 'object',
    additionalProperties: true,
    nullable: true,
    description:
      `The client's label of the batch, returned as sent (at most ${MAX_METADATA_BYTES} bytes of JSON); ` +
      "part of the batch's fingerprint.",
    example: { source: 'nightly-import' },
  })
  metadata?: Record<string, unknown> | null;

  @ApiPropertyOptional({
    type: 'integer',
    minimum: MIN_PRIORITY,
    maximum: MAX_PRIORITY,
    default: 0,
    description: "Every job's priority (higher first); not part of any fingerprint.",
  })
  priority?: number;
}

export class ListBatchJobsQueryDto extends PageQueryDto {
  @ApiPropertyOptional({ enum: JOB_STATUSES, description: 'Only the items whose job is in this status.' })
  @IsOptional()
  @IsIn(JOB_STATUSES)
  status?: JobStatus;
}

export class ListBatchesQueryDto extends PageQueryDto {}

export class BatchEventsQueryDto {
  @ApiPropertyOptional({
    description:
      'With `Accept: text/event-stream`: resume after this message id, as the `Last-Event-ID` header does (for ' +
      'clients that cannot set headers), at most 9223372036854775807. Ignored by the JSON answer.',
    pattern: EVENT_ID_PATTERN,
  })
  @IsOptional()
  @IsString()
  @IsEventId({ message: `lastEventId must be an event id (0 to ${MAX_EVENT_ID})` })
  lastEventId?: string;

  @AccessTokenQuery()
  access_token?: string;
}
