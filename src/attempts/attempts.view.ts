import { ApiProperty } from '@nestjs/swagger';

import { AttemptView, toAttemptView } from '../jobs/job.view.js';
import { JOB_STATUSES, type JobWithAttempts } from '../ledger/job.types.js';

/** The state of a job without its content: what an operator who resolved one of its attempts needs to know. */
export class JobStateView {
  @ApiProperty({ format: 'uuid' }) id!: string;
  @ApiProperty({ enum: JOB_STATUSES }) status!: string;
  @ApiProperty({ type: 'integer', minimum: 0 }) version!: number;
}

/**
 * The answer to a resolve. `attempts:resolve` reaches every owner's attempts, not their jobs' input, key or
 * result: those stay behind `jobs:read` (the owner) and `ops:read` (GET /v1/ops/jobs/{id}).
 */
export class ResolvedAttemptView {
  @ApiProperty({ type: AttemptView }) attempt!: AttemptView;
  @ApiProperty({ type: JobStateView }) job!: JobStateView;
}

export function toResolvedAttemptView(job: JobWithAttempts, attemptId: string): ResolvedAttemptView {
  return {
    attempt: toAttemptView(job.attempts.find((a) => a.id === attemptId)!),
    job: { id: job.id, status: job.status, version: job.version },
  };
}
