/** The stable machine-readable codes of DESIGN I8 (plus the transport-level ones the filter needs). */
export type ErrorCode =
  | 'idempotency_key_missing'
  | 'idempotency_key_invalid'
  | 'idempotency_key_reused'
  | 'attempt_in_progress'
  | 'attempt_not_unknown'
  | 'job_terminal'
  | 'validation_failed'
  | 'unknown_operation'
  | 'unknown_provider'
  | 'provider_not_certified'
  | 'provider_paused'
  | 'webhook_disabled'
  | 'webhook_endpoint_limit'
  | 'webhook_rotation_limit'
  | 'budget_exceeded'
  | 'not_found'
  | 'unauthorized'
  | 'key_revoked'
  | 'token_expired'
  | 'forbidden'
  | 'payload_too_large'
  | 'unsupported_media_type'
  | 'service_unavailable'
  | 'internal_error';

export interface FieldError {
  field: string;
  message: string;
  /** Where one request holds many refusals (a batch's items): this field's own code. */
  code?: ErrorCode;
}

/** A refusal the client can act on. The global filter renders it as RFC 9457 problem+json. */
export class DomainError extends Error {
  /** Sent as Retry-After when set (429 with a known reset time). */
  retryAfterSeconds?: number;

  constructor(
    readonly code: ErrorCode,
    readonly status: number,
    message: string,
    readonly errors: FieldError[] = [],
  ) {
    super(message);
    this.name = new.target.name;
  }
}

/** Field errors reported in one problem; a body with 90k unknown members once answered 10 MB of them. */
export const MAX_REPORTED_ERRORS = 20;

export class ValidationFailedError extends DomainError {
  /** Field errors found beyond MAX_REPORTED_ERRORS, counted but not listed. */
  readonly errorsOmitted: number;

  constructor(errors: FieldError[], status = 400, code: ErrorCode = 'validation_failed') {
    const shown = errors.slice(0, MAX_REPORTED_ERRORS);
    const omitted = errors.length - shown.length;
    const detail = shown.map((e) => `${e.field}: ${e.message}`).join('; ') || 'The request is invalid.';
    super(code, status, omitted ? `${detail}; and ${omitted} more` : detail, shown);
    this.errorsOmitted = omitted;
  }
}

export class NotFoundError extends DomainError {
  constructor(what: string) {
    super('not_found', 404, `${what} was not found.`);
  }
}

export class UnknownOperationError extends DomainError {
  constructor(operation: string) {
    super('unknown_operation', 422, `The catalog has no operation named ${JSON.stringify(operation)}.`, [
      { field: 'operation', message: 'is not an operation of the catalog' },
    ]);
  }
}

export class UnknownProviderError extends DomainError {
  constructor(field: string, provider: string, why = 'is not a provider of the catalog') {
    super('unknown_provider', 422, `${field}: ${JSON.stringify(provider)} ${why}.`, [{ field, message: why }]);
  }
}

export class ProviderNotCertifiedError extends DomainError {
  constructor(provider: string, operation: string) {
    super(
      'provider_not_certified',
      409,
      `${JSON.stringify(provider)} is neither the job's primary nor certified for ${JSON.stringify(operation)} ` +
        'under its current contract (I6).',
      [{ field: 'provider', message: 'is not certified for the operation' }],
    );
  }
}

/**
 * An owner asked for an attempt on a provider that is paused by its own rate limit (docs/design.md#capacity): the
 * call would be refused, or worse counted against us. Retry-After says when the pause ends; another provider of the
 * chain may be named meanwhile.
 */
export class ProviderPausedError extends DomainError {
  constructor(provider: string, pausedForMs: number) {
    const detail =
      `${JSON.stringify(provider)} is paused by its own rate limit; ask again after the pause, ` +
      'or name another provider of the chain.';
    super('provider_paused', 409, detail, [{ field: 'provider', message: 'is paused by its rate limit' }]);
    this.retryAfterSeconds = Math.max(1, Math.ceil(pausedForMs / 1000));
  }
}
