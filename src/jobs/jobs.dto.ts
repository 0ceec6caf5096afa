import { ApiProperty, ApiPropertyOptional } from '@nestjs/swagger';
import {
  ArrayMaxSize,
  ArrayMinSize,
  ArrayUnique,
  IsArray,
  IsIn,
  IsInt,
  IsObject,
  IsOptional,
  IsString,
  Length,
  Max,
  Min,
} from 'class-validator';

import { PageQueryDto } from '../common/page-query.dto.js';
import { JOB_STATUSES, type JobStatus } from '../ledger/job.types.js';

export { CURSOR } from '../common/page-query.dto.js';

export class CreateJobDto {
  @ApiProperty({
    description: 'Name of an operation of the catalog (GET /v1/operations).',
    example: 'summarize',
    minLength: 1,
    maxLength: 100,
  })
  @IsString()
  @Length(1, 100)
  operation!: string;

  @ApiProperty({
    description: "The operation's input; validated against its input schema (422 when it fails).",
    type: 'object',
    additionalProperties: true,
    example: { text: 'The quick brown fox jumps over the lazy dog.' },
  })
  @IsObject()
  input!: Record<string, unknown>;

  @ApiPropertyOptional({
    description:
      "Ordered provider chain, primary first. Omitted: the operation's default chain (and the " +
      'fingerprint records null).',
    type: 'array',
    items: { type: 'string', minLength: 1, maxLength: 100 },
    minItems: 1,
    maxItems: 10,
    uniqueItems: true,
    example: ['sim-primary', 'sim-fallback'],
  })
  @IsOptional()
  @IsArray()
  @ArrayMinSize(1)
  @ArrayMaxSize(10)
  @ArrayUnique()
  @IsString({ each: true })
  @Length(1, 100, { each: true })
  providers?: string[];

  @ApiPropertyOptional({
    description:
      "Higher first among the owner's own due jobs (0 when omitted); never ahead of another owner's fair share. " +
      'Not part of the fingerprint: a replay with another priority answers the existing job, whose ' +
      'priority stays as created.',
    type: 'integer',
    minimum: -1000,
    maximum: 1000,
    example: 0,
  })
  @IsOptional()
  @IsInt()
  @Min(-1000)
  @Max(1000)
  priority?: number;
}

export class ListJobsQueryDto extends PageQueryDto {
  @ApiPropertyOptional({ enum: JOB_STATUSES })
  @IsOptional()
  @IsIn(JOB_STATUSES)
  status?: JobStatus;
}
