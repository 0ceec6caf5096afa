import { DomainError } from '../common/domain.errors.js';

export class IdempotencyKeyReusedError extends DomainError {
  constructor() {
    super(
      'idempotency_key_reused',
      409,
      'This Idempotency-Key is bound to another request (operation, input or providers differ). Use ' +
        'a new key for a new intent.',
      [{ field: 'Idempotency-Key', message: 'was used with a different request body' }],
    );
  }
}

export class IdempotencyKeyMissingError extends DomainError {
  constructor() {
    super('idempotency_key_missing', 400, 'The Idempotency-Key header is required.', [
      { field: 'Idempotency-Key', message: 'is required' },
    ]);
  }
}

export class IdempotencyKeyInvalidError extends DomainError {
  constructor(why: string) {
    super('idempotency_key_invalid', 400, `The Idempotency-Key header ${why}.`, [
      { field: 'Idempotency-Key', message: why },
    ]);
  }
}
