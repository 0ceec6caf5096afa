import { DomainError } from '../common/domain.errors.js';

/**
 * The INSERT found the key taken on the owner-and-key constraint (UQ_jobs_owner_idempotency_key; a batch's,
 * UQ_batches_owner_idempotency_key): the route's IdempotencyInterceptor turns this into a replay or a 409.
 */
export class DuplicateIdempotencyKeyError extends Error {
  constructor(
    readonly ownerId: string,
    readonly idempotencyKey: string,
    readonly fingerprint: string,
  ) {
    super('a job with this owner and idempotency key exists');
    this.name = 'DuplicateIdempotencyKeyError';
  }
}

/** A budgeted create the budget cannot hold (JobsRepository.insertJob): JobsService answers a replay or 429. */
export class OverBudgetError extends Error {
  constructor(
    readonly monthlyLimit: number,
    readonly currency: string,
    /** Spent this month plus what live jobs still hold, when the create was refused. */
    readonly used: number,
  ) {
    super("the owner's budget cannot hold this job's worst case");
    this.name = 'OverBudgetError';
  }
}

export class JobTerminalError extends DomainError {
  constructor(status: string) {
    super('job_terminal', 409, `The job is ${status}: it takes no further attempts or cancellation.`);
  }
}

export class AttemptInProgressError extends DomainError {
  constructor() {
    super(
      'attempt_in_progress',
      409,
      'The job has an attempt that is starting, running or unknown; resolve it (or cancel the job) first.',
    );
  }
}

export class AttemptNotUnknownError extends DomainError {
  constructor(status: string) {
    super('attempt_not_unknown', 409, `Only an unknown attempt can be resolved; this one is ${status}.`);
  }
}
