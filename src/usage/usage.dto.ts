import { ApiProperty, ApiPropertyOptional } from '@nestjs/swagger';
import { IsIn, IsISO8601, IsNumber, IsOptional, IsString, Length, Matches, Max, Min } from 'class-validator';

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

export class SetBudgetDto {
  @ApiProperty({ description: 'The most this owner may spend per calendar month (UTC), in `currency`.', example: 50 })
  @IsNumber({ allowNaN: false, allowInfinity: false, maxDecimalPlaces: 8 })
  @Min(0)
  @Max(1_000_000_000)
  monthlyLimit!: number;

  @ApiProperty({ description: 'ISO 4217; only attempts priced in this currency count.', example: 'USD' })
  @Matches(/^[A-Z]{3}$/, { message: 'currency must be three capital letters (ISO 4217)' })
  currency!: string;
}

/** `/v1/ops/budgets/{ownerId}`: an owner as API keys name it (`apikey create --owner`, 1-200 characters). */
export class BudgetOwnerParamsDto {
  @ApiProperty({ description: 'The owner, as its API keys name it.', minLength: 1, maxLength: 200 })
  @IsString()
  @Length(1, 200)
  ownerId!: string;
}
