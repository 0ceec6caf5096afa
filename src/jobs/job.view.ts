import { ApiProperty, type ApiPropertyOptions } from '@nestjs/swagger';

import { type Attempt, ATTEMPT_STATUSES, RESOLVED_BY } from '../ledger/attempt.types.js';
import {
  type Job,
  JOB_STATUSES,
  type JobWithAttempts,
  LIST_RESULT_MAX_BYTES,
  type ListedJob,
} from '../ledger/job.types.js';
import { CURSOR } from './jobs.dto.js';

export interface UsageView {
  promptTokens: number;
  completionTokens: number;
}

/**
 * Inline rather than a $ref: in OpenAPI 3.0 `nullable` does not reach into `allOf`, so `allOf: [$ref] + nullable`
 * (what a class type gives) refuses the null every unsucceeded attempt carries.
 */
const usageSchema: ApiPropertyOptions = {
  type: 'object',
  nullable: true,
  description: 'Tokens the provider billed; null until the attempt succeeds.',
  required: ['promptTokens', 'completionTokens'],
  selfRequired: true,
  properties: { promptTokens: { type: 'integer', minimum: 0 }, completionTokens: { type: 'integer', minimum: 0 } },
};

export class CostView {
  @ApiProperty({ description: 'Rounded to 8 decimals.' }) amount!: number;
  @ApiProperty({ description: 'ISO 4217.' }) currency!: string;
}

export class JobCostView {
  @ApiProperty({ description: 'ISO 4217.' }) currency!: string;
  @ApiProperty({ description: 'Every attempt of the job, won, discarded or failed.' }) total!: number;
  @ApiProperty({ description: 'Spent on results that lost the settlement race (paid for, thrown away).' })
  discarded!: number;
}

export class AttemptView {
  @ApiProperty({ format: 'uuid', example: '0193e0b2-7d10-7b6f-8c2a-1e5f3a9d4b70' }) id!: string;
  @ApiProperty({ type: 'integer', minimum: 1, example: 1 }) number!: number;
  @ApiProperty({ example: 'sim-primary' }) provider!: string;
  @ApiProperty({ enum: ATTEMPT_STATUSES }) status!: string;
  @ApiProperty({ enum: ['won', 'discarded', null], nullable: true, type: String }) outcome!: string | null;
  @ApiProperty({ type: 'object', nullable: true, additionalProperties: true }) error!: unknown;
  @ApiProperty(usageSchema) usage!: UsageView | null;
  @ApiProperty({
    description: 'SHA-256 of the result this attempt returned (kept for discarded results, whose payload is dropped).',
    nullable: true,
    type: String,
    pattern: '^[0-9a-f]{64}$',
  })
  resultDigest!: string | null;
  @ApiProperty({
    nullable: true,
    type: String,
    description:
      "The provider's own id of the request (OpenAI's response id), committed as soon as the provider gave it.",
    example: 'resp_67ccd2bed1ec8190b14f964abc0542670bb6a6b452d3795b',
  })
  providerRequestId!: string | null;
  @ApiProperty({
    nullable: true,
    type: String,
    description:
      'What the provider last said of the request it keeps by id: queued, in_progress, completed, failed, cancelled, ' +
      'incomplete; expired when it no longer knows the id; unknowable when the create call never returned one.',
    example: 'completed',
  })
  providerStatus!: string | null;
  @ApiProperty({
    enum: [...RESOLVED_BY, null],
    nullable: true,
    type: String,
    description: "How an unknown attempt ended: the provider's record (a look-up), an operator, or the deadline.",
  })
  resolvedBy!: string | null;
  @ApiProperty({ format: 'date-time' }) startedAt!: string;
  @ApiProperty({ format: 'date-time' }) deadlineAt!: string;
  @ApiProperty({ format: 'date-time', nullable: true, type: String }) finishedAt!: string | null;
  @ApiProperty({
    type: 'object',
    nullable: true,
    required: ['amount', 'currency'],
    selfRequired: true,
    properties: {
      amount: { type: 'number', description: 'Rounded to 8 decimals.' },
      currency: { type: 'string', description: 'ISO 4217.' },
    },
    description:
      "From the usage, at the provider's catalog pricing when it was written; null without either " +
      '(inline: see usageSchema).',
  })
  cost!: CostView | null;
}

/** The fields every view of a job has (not a schema of the document by itself). */
export class JobFieldsView {
  @ApiProperty({ format: 'uuid', example: '0193e0b2-7c51-7d7a-9a4e-5d3b1f0c2a11' }) id!: string;
  @ApiProperty({ enum: JOB_STATUSES, example: 'succeeded' }) status!: string;
  @ApiProperty({ example: 'summarize' }) operation!: string;
  @ApiProperty({
    type: 'object',
    additionalProperties: true,
    example: { text: 'Idempotency keys bind one intent to one job.' },
  })
  input!: unknown;
  @ApiProperty({ type: [String], example: ['sim-primary', 'sim-fallback'] }) providers!: string[];
  @ApiProperty({ minLength: 1, maxLength: 255, pattern: '^[\\x21-\\x7e]+$', example: 'summary-report-2026-12-01' })
  idempotencyKey!: string;
  @ApiProperty({ type: 'integer', minimum: 0, description: 'Bumped only by settlement and cancellation.' })
  version!: number;
  @ApiProperty({
    type: 'integer',
    minimum: -1000,
    maximum: 1000,
    example: 0,
    description: "Higher first among the owner's own due jobs (as created; not part of the fingerprint).",
  })
  priority!: number;
  @ApiProperty({
    type: 'object',
    nullable: true,
    additionalProperties: true,
    example: { summary: 'A key binds one intent to one job.' },
  })
  result!: unknown;
  @ApiProperty({ type: 'object', nullable: true, additionalProperties: true, example: null }) error!: unknown;
  @ApiProperty({
    format: 'uuid',
    nullable: true,
    type: String,
    description: 'The attempt whose result won.',
    example: '0193e0b2-7d10-7b6f-8c2a-1e5f3a9d4b70',
  })
  completedBy!: string | null;
  @ApiProperty({ format: 'date-time' }) createdAt!: string;
  @ApiProperty({ format: 'date-time' }) updatedAt!: string;
  @ApiProperty({ format: 'date-time', nullable: true, type: String }) completedAt!: string | null;
}

/** A list page's job: a large result is left out of it (issue 22 item 4). */
export class JobSummaryView extends JobFieldsView {
  @ApiProperty({
    description:
      `True when the result is longer than ${LIST_RESULT_MAX_BYTES} bytes as JSON: it is left out of list pages ` +
      '(result is null) and `GET /v1/jobs/{id}` carries it.',
  })
  resultOmitted!: boolean;
}

export class JobView extends JobFieldsView {
  @ApiProperty({ type: [AttemptView] }) attempts!: AttemptView[];
  @ApiProperty({
    type: [JobCostView],
    description: "The attempts' cost per currency (empty when no attempt was priced).",
  })
  cost!: JobCostView[];
}

export class JobPageView {
  @ApiProperty({ type: [JobSummaryView] }) items!: JobSummaryView[];
  @ApiProperty({ nullable: true, type: String, pattern: CURSOR.source, description: 'Null on the last page.' })
  nextCursor!: string | null;
}

const iso = (date: Date | null) => (date ? date.toISOString() : null);

export function toAttemptView(attempt: Attempt): AttemptView {
  return {
    id: attempt.id,
    number: attempt.number,
    provider: attempt.provider,
    status: attempt.status,
    outcome: attempt.outcome,
    error: attempt.error,
    usage: attempt.usage,
    resultDigest: attempt.resultDigest,
    providerRequestId: attempt.providerRequestId,
    providerStatus: attempt.providerStatus,
    resolvedBy: attempt.resolvedBy,
    startedAt: attempt.startedAt.toISOString(),
    deadlineAt: attempt.deadlineAt.toISOString(),
    finishedAt: iso(attempt.finishedAt),
    cost:
      attempt.cost === null || attempt.costCurrency === null
        ? null
        : { amount: attempt.cost, currency: attempt.costCurrency },
  };
}

const round8 = (n: number) => Math.round(n * 1e8) / 1e8;

/** Per currency: the total and the share spent on discarded results. */
export function jobCost(attempts: Attempt[]): JobCostView[] {
  const byCurrency = new Map<string, JobCostView>();
  for (const attempt of attempts) {
    if (attempt.cost === null || attempt.costCurrency === null) continue;
    const entry = byCurrency.get(attempt.costCurrency) ?? { currency: attempt.costCurrency, total: 0, discarded: 0 };
    entry.total = round8(entry.total + attempt.cost);
    if (attempt.outcome === 'discarded') entry.discarded = round8(entry.discarded + attempt.cost);
    byCurrency.set(attempt.costCurrency, entry);
  }
  return [...byCurrency.values()];
}

function toJobFields(job: Job): JobFieldsView {
  return {
    id: job.id,
    status: job.status,
    operation: job.operation,
    input: job.input,
    providers: job.providers,
    idempotencyKey: job.idempotencyKey,
    version: job.version,
    priority: job.priority,
    result: job.result,
    error: job.error,
    completedBy: job.completedBy,
    createdAt: job.createdAt.toISOString(),
    updatedAt: job.updatedAt.toISOString(),
    completedAt: iso(job.completedAt),
  };
}

export function toJobSummaryView(job: ListedJob): JobSummaryView {
  return { ...toJobFields(job), resultOmitted: job.resultOmitted };
}

export function toJobView(job: JobWithAttempts): JobView {
  return { ...toJobFields(job), attempts: job.attempts.map(toAttemptView), cost: jobCost(job.attempts) };
}
