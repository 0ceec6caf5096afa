import { ApiPropertyOptional } from '@nestjs/swagger';
import { Type } from 'class-transformer';
import { IsIn, IsInt, IsOptional, IsString, Length, Max, Min } from 'class-validator';

import { AccessTokenQuery } from '../auth/access-token.query.js';
import { EVENT_ID_PATTERN, IsEventId, MAX_EVENT_ID } from '../common/event-ids.js';
import { PageQueryDto } from '../common/page-query.dto.js';
import { JOB_STATUSES, type JobStatus } from '../ledger/job.types.js';

export class ListEventsQueryDto extends PageQueryDto {
  @ApiPropertyOptional({ type: 'integer', minimum: 1, maximum: 500, default: 100 })
  @IsOptional()
  @Type(() => Number)
  @IsInt()
  @Min(1)
  @Max(500)
  override limit: number = 100;

  @ApiPropertyOptional({
    description:
      'With `Accept: text/event-stream`: resume after this event id, as the `Last-Event-ID` header does (for clients ' +
      'that cannot set headers), at most 9223372036854775807. Ignored by the JSON pages.',
    pattern: EVENT_ID_PATTERN,
  })
  @IsOptional()
  @IsString()
  @IsEventId({ message: `lastEventId must be an event id (0 to ${MAX_EVENT_ID})` })
  lastEventId?: string;

  @AccessTokenQuery()
  access_token?: string;
}

export const QUEUE_STATUSES = ['unknown', 'running', 'starting'] as const;

export class ListAttemptsQueryDto extends PageQueryDto {
  @ApiPropertyOptional({
    enum: QUEUE_STATUSES,
    default: 'unknown',
    description: 'Live attempts only: the ones that may need a decision.',
  })
  @IsOptional()
  @IsIn(QUEUE_STATUSES)
  status: (typeof QUEUE_STATUSES)[number] = 'unknown';

  @ApiPropertyOptional({ description: 'Only this provider.' })
  @IsOptional()
  @IsString()
  @Length(1, 100)
  provider?: string;

  @ApiPropertyOptional({
    type: 'integer',
    description: 'Only attempts that have waited at least this many seconds.',
    minimum: 0,
    maximum: 31_536_000,
  })
  @IsOptional()
  @Type(() => Number)
  @IsInt()
  @Min(0)
  @Max(31_536_000)
  olderThan?: number;
}

export class ListOpsJobsQueryDto extends PageQueryDto {
  @ApiPropertyOptional({ enum: JOB_STATUSES })
  @IsOptional()
  @IsIn(JOB_STATUSES)
  status?: JobStatus;

  @ApiPropertyOptional({ description: 'Only this owner.' })
  @IsOptional()
  @IsString()
  @Length(1, 200)
  owner?: string;

  @ApiPropertyOptional({ description: "The job's Idempotency-Key; needs owner (a key is unique per owner only)." })
  @IsOptional()
  @IsString()
  @Length(1, 255)
  idempotencyKey?: string;
}

export class StatsQueryDto {
  @ApiPropertyOptional({
    type: 'integer',
    minimum: 1,
    maximum: 1440,
    default: 60,
    description: 'How many minutes back, one bucket per minute.',
  })
  @IsOptional()
  @Type(() => Number)
  @IsInt()
  @Min(1)
  @Max(1440)
  minutes: number = 60;
}
