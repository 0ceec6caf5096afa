import { ApiPropertyOptional } from '@nestjs/swagger';
import { IsIn, IsISO8601, IsOptional } from 'class-validator';
import type { UsageGroupBy } from './usage.repository.js';

export class UsageQueryDto {
  @ApiPropertyOptional({ format: 'date-time', description: 'Inclusive; default: the first day of this month (UTC).' })
  @IsOptional()
  @IsISO8601({ strict: true })
  from?: string;

  @ApiPropertyOptional({ format: 'date-time', description: 'Exclusive; default: now.' })
  @IsOptional()
  @IsISO8601({ strict: true })
  to?: string;

  @ApiPropertyOptional({ enum: ['operation', 'provider', 'day'], default: 'day' })
  @IsOptional()
  @IsIn(['operation', 'provider', 'day'])
  groupBy: UsageGroupBy = 'day';
}
