import { ApiProperty } from '@nestjs/swagger';

export class UsageGroupView {
  @ApiProperty({ description: 'The operation, the provider, or the day (YYYY-MM-DD, UTC).' }) key!: string;
  @ApiProperty({
    nullable: true,
    type: String,
    description: 'ISO 4217; null for attempts on providers without pricing.',
  })
  currency!: string | null;
  @ApiProperty() attempts!: number;
  @ApiProperty() promptTokens!: number;
  @ApiProperty() completionTokens!: number;
  @ApiProperty({ description: 'Every attempt with usage, won, discarded or failed.' }) cost!: number;
  @ApiProperty({ description: 'The part of `cost` spent on results that lost the settlement race.' })
  discardedCost!: number;
}

export class UsageView {
  @ApiProperty({ format: 'date-time' }) from!: string;
  @ApiProperty({ format: 'date-time' }) to!: string;
  @ApiProperty({ enum: ['operation', 'provider', 'day'] }) groupBy!: string;
  @ApiProperty({ type: [UsageGroupView] }) groups!: UsageGroupView[];
}

export class BudgetView {
  @ApiProperty() monthlyLimit!: number;
  @ApiProperty() currency!: string;
  @ApiProperty({ description: 'Spent this calendar month (UTC) in `currency`.' }) spent!: number;
  @ApiProperty({
    description:
      "Held by live jobs: each one's worst case (prompt and maxTokens at its chain's dearest price) " +
      'less what its attempts cost so far. A create is refused once spent + reserved reaches monthlyLimit.',
  })
  reserved!: number;
  @ApiProperty({ format: 'date-time' }) resetsAt!: string;
}
