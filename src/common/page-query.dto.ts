import { ApiPropertyOptional } from '@nestjs/swagger';
import { Type } from 'class-transformer';
import { IsInt, IsOptional, IsString, Matches, Max, Min } from 'class-validator';

/** The shape of a cursor this API hands out (base64url); anything else is refused before the database sees it. */
export const CURSOR = /^[A-Za-z0-9_-]{1,100}$/;

/** `?limit=` of every list endpoint (1-100, default 20); a list may override the bounds. */
export class LimitQueryDto {
  @ApiPropertyOptional({ type: 'integer', minimum: 1, maximum: 100, default: 20 })
  @IsOptional()
  @Type(() => Number)
  @IsInt()
  @Min(1)
  @Max(100)
  limit: number = 20;
}

/** `?limit=&cursor=`: keyset pages, the cursor being the `nextCursor` of the previous page. */
export class PageQueryDto extends LimitQueryDto {
  @ApiPropertyOptional({ description: 'The nextCursor of the previous page (opaque).', pattern: CURSOR.source })
  @IsOptional()
  @IsString()
  @Matches(CURSOR, { message: 'cursor must be a cursor this API returned' })
  cursor?: string;
}
