import { ApiProperty, ApiPropertyOptional } from '@nestjs/swagger';
import { Type } from 'class-transformer';
import { IsInt, IsOptional, IsString, Length, Max, Min, ValidateIf } from 'class-validator';

export class OwnerParamsDto {
  @ApiProperty({ description: 'The owner, as its API keys name it.', minLength: 1, maxLength: 200 })
  @IsString()
  @Length(1, 200)
  owner!: string;
}

export class SetOwnerShareDto {
  @ApiProperty({
    type: 'integer',
    minimum: 1,
    maximum: 100,
    example: 2,
    description:
      'Its share of contended slots against the other owners with due work: a weight of 2 gets twice the share of 1.',
  })
  @IsInt()
  @Min(1)
  @Max(100)
  weight!: number;

  @ApiPropertyOptional({
    type: 'integer',
    nullable: true,
    minimum: 0,
    maximum: 100_000,
    example: 20,
    description:
      "The most of the owner's jobs running at once, across every provider and replica; null or omitted: no cap.",
  })
  @IsOptional()
  @ValidateIf((_, value) => value !== null)
  @IsInt()
  @Min(0)
  @Max(100_000)
  maxConcurrency?: number | null;
}

export class ListOwnersQueryDto {
  @ApiPropertyOptional({ type: 'integer', minimum: 1, maximum: 1000, default: 100 })
  @IsOptional()
  @Type(() => Number)
  @IsInt()
  @Min(1)
  @Max(1000)
  limit: number = 100;
}
