import { ApiProperty, ApiPropertyOptional } from '@nestjs/swagger';
import { Type } from 'class-transformer';
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
  Matches,
  Max,
  Min,
} from 'class-validator';
import { JOB_STATUSES, type JobStatus } from '../ledger/job.types.js';

/** The shape of a cursor this API hands out (base64url); anything else is refused before the database sees it. */
export const CURSOR = /^[A-Za-z0-9_-]{1,100}$/;

export class CreateJobDto {
  @ApiProperty({ description: 'Name of an operation of the catalog (GET /v1/operations).', example: 'summarize', minLength: 1, maxLength: 100 })
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
    description: "Ordered provider chain, primary first. Omitted: the operation's default chain (and the fingerprint records null).",
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
}

export class ListJobsQueryDto {
  @ApiPropertyOptional({ enum: JOB_STATUSES })
  @IsOptional()
  @IsIn(JOB_STATUSES)
  status?: JobStatus;

  @ApiPropertyOptional({ type: 'integer', minimum: 1, maximum: 100, default: 20 })
  @IsOptional()
  @Type(() => Number)
  @IsInt()
  @Min(1)
  @Max(100)
  limit: number = 20;

  @ApiPropertyOptional({ description: 'The nextCursor of the previous page (opaque).', pattern: CURSOR.source })
  @IsOptional()
  @IsString()
  @Matches(CURSOR, { message: 'cursor must be a cursor this API returned' })
  cursor?: string;
}
