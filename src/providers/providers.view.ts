import { ApiProperty } from '@nestjs/swagger';

import type { JsonSchema } from '../config/catalog.types.js';

export class ProviderCapabilitiesView {
  @ApiProperty({ description: 'The endpoint can constrain output to a JSON schema.' }) jsonSchema!: boolean;
  @ApiProperty() cancel!: boolean;
  @ApiProperty({
    description: 'The adapter can ask what became of a request (the reconciler uses it for unknown attempts).',
  })
  lookup!: boolean;
}

export class BreakerView {
  @ApiProperty({ enum: ['closed', 'open', 'half_open'] }) state!: 'closed' | 'open' | 'half_open';
  @ApiProperty({
    format: 'date-time',
    nullable: true,
    type: String,
    description: 'When it entered this state; null if it never left closed.',
  })
  since!: string | null;
  @ApiProperty({
    type: 'integer',
    minimum: 0,
    description: 'Counted failures (timeouts, retryable failures) within the window.',
  })
  failuresInWindow!: number;
}

/** docs/design.md#capacity */
export class CapacityView {
  @ApiProperty({
    type: 'integer',
    minimum: 0,
    description: 'Calls in flight across all replicas (live leases for a capped provider).',
  })
  inFlight!: number;
  @ApiProperty({ type: 'integer', nullable: true, minimum: 1 }) maxConcurrency!: number | null;
  @ApiProperty({ type: 'integer', nullable: true, minimum: 1 }) requestsPerMinute!: number | null;
  @ApiProperty({ type: 'integer', nullable: true, minimum: 1 }) tokensPerMinute!: number | null;
  @ApiProperty({
    type: 'integer',
    minimum: 0,
    description: 'Calls started in the current clock minute (rate-limited providers).',
  })
  requestsThisMinute!: number;
  @ApiProperty({ type: 'integer', minimum: 0 }) tokensThisMinute!: number;
  @ApiProperty({
    format: 'date-time',
    nullable: true,
    type: String,
    description: "No call starts before this: the provider's own rate-limit answer asked for it.",
  })
  pausedUntil!: string | null;
  @ApiProperty({ type: BreakerView }) breaker!: BreakerView;
}

export class ProviderCertificationView {
  @ApiProperty() operation!: string;
  @ApiProperty() passed!: boolean;
  @ApiProperty({ description: "Run against the catalog's current contract for the operation." }) current!: boolean;
  @ApiProperty({ description: 'What failover asks: passed and current.' }) certified!: boolean;
  @ApiProperty({ pattern: '^[0-9a-f]{64}$' }) contractDigest!: string;
  @ApiProperty({
    format: 'date-time',
    description: 'When the newest run (the one that counts) was made: the last run.',
  })
  certifiedAt!: string;
  @ApiProperty({ format: 'uuid' }) reportId!: string;
  @ApiProperty({
    enum: ['request', 'schedule'],
    description: 'What made the last run: an admin (or the CLI), or the schedule.',
  })
  trigger!: 'request' | 'schedule';
  @ApiProperty({
    format: 'date-time',
    nullable: true,
    type: String,
    description: "The next scheduled run (the provider's recertify); null without a schedule.",
  })
  nextRunAt!: string | null;
}

export class RecertifyView {
  @ApiProperty({
    nullable: true,
    type: Number,
    description:
      'The golden cases of every operation the provider holds a report for are re-run this often; null: never.',
  })
  everyHours!: number | null;
}

export class ProviderView {
  @ApiProperty() name!: string;
  @ApiProperty({ enum: ['simulated', 'openai', 'anthropic'] }) kind!: string;
  @ApiProperty() model!: string;
  @ApiProperty({ type: 'integer' }) timeoutMs!: number;
  @ApiProperty({ type: 'integer' }) hardTimeoutMs!: number;
  @ApiProperty({ enum: ['hold', 'failover'] }) onTimeout!: string;
  @ApiProperty() sideEffectFree!: boolean;
  @ApiProperty({ type: 'integer' }) maxAttempts!: number;
  @ApiProperty({ type: 'integer' }) maxDeferrals!: number;
  @ApiProperty({ type: 'integer' }) contextWindow!: number;
  @ApiProperty({ type: ProviderCapabilitiesView }) capabilities!: ProviderCapabilitiesView;
  @ApiProperty({ type: CapacityView, description: 'Shared capacity, read now (docs/design.md#capacity).' })
  capacity!: CapacityView;
  @ApiProperty({ type: [ProviderCertificationView] }) certifications!: ProviderCertificationView[];
  @ApiProperty({ type: RecertifyView, description: "The provider's schedule of re-certification (docs/catalog.md)." })
  recertify!: RecertifyView;
}

export class OperationView {
  @ApiProperty() name!: string;
  @ApiProperty() temperature!: number;
  @ApiProperty({ type: 'integer' }) maxTokens!: number;
  @ApiProperty({ type: 'object', additionalProperties: true, description: 'JSON Schema of a job input.' })
  inputSchema!: JsonSchema;
  @ApiProperty({ type: 'object', additionalProperties: true, description: 'JSON Schema a result must satisfy.' })
  outputSchema!: JsonSchema;
  @ApiProperty({ type: [String], description: 'The default provider chain, primary first.' }) providers!: string[];
  @ApiProperty({ type: 'integer', description: 'Golden cases certification runs.' }) goldenCases!: number;
}
