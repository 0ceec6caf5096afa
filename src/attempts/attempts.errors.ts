import { DomainError } from '../common/domain.errors.js';

export class AttemptInProgressError extends DomainError {
  constructor() {
    super('attempt_in_progress', 409, 'The job has an attempt that is starting, running or unknown; resolve it (or cancel the job) first.');
  }
}

export class AttemptNotUnknownError extends DomainError {
  constructor(status: string) {
    super('attempt_not_unknown', 409, `Only an unknown attempt can be resolved; this one is ${status}.`);
  }
}
