import { DomainError } from '../common/domain.errors.js';

/** The batch's key names a batch of other items (or metadata): I2 at the batch level. */
export class BatchKeyReusedError extends DomainError {
  constructor() {
    super(
      'idempotency_key_reused',
      409,
      'This Idempotency-Key is bound to another batch (its items, in order, or its metadata differ). ' +
        'Use a new key for a new batch.',
      [{ field: 'Idempotency-Key', message: 'was used with a different batch' }],
    );
  }
}
