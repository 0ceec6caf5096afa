import { DomainError } from '../common/domain.errors.js';

/** The INSERT hit UQ_jobs_owner_idempotency_key: the idempotency interceptor turns this into a replay or a 409. */
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

export class IdempotencyKeyReusedError extends DomainError {
  constructor() {
    super(
      'idempotency_key_reused',
      409,
      'This Idempotency-Key is bound to another request (operation, input or providers differ). Use a new key for a new intent.',
      [{ field: 'Idempotency-Key', message: 'was used with a different request body' }],
    );
  }
}

export class IdempotencyKeyMissingError extends DomainError {
  constructor() {
    super('idempotency_key_missing', 400, 'The Idempotency-Key header is required.', [{ field: 'Idempotency-Key', message: 'is required' }]);
  }
}

export class IdempotencyKeyInvalidError extends DomainError {
  constructor(why: string) {
    super('idempotency_key_invalid', 400, `The Idempotency-Key header ${why}.`, [{ field: 'Idempotency-Key', message: why }]);
  }
}

export class JobTerminalError extends DomainError {
  constructor(status: string) {
    super('job_terminal', 409, `The job is ${status}: it takes no further attempts or cancellation.`);
  }
}
