import type { Batch, Job, Problem } from './types.js';

export type FieldError = NonNullable<Problem['errors']>[number];

/** Every error this client throws. */
export class OnejobError extends Error {
  override readonly name: string = 'OnejobError';
}

/**
 * The service answered with a problem (RFC 9457). `code` is stable (the service's docs/errors.md); `requestId` is
 * the one to quote when asking about the request; `errors` name the fields to blame.
 */
export class ApiError extends OnejobError {
  override readonly name: string = 'ApiError';
  readonly code: string;
  readonly requestId: string | undefined;
  readonly errors: FieldError[];

  constructor(
    readonly status: number,
    readonly problem: Problem | undefined,
    requestId: string | undefined,
  ) {
    super(problem ? `${status} ${problem.code}: ${problem.detail}` : `HTTP ${status}`);
    this.code = problem?.code ?? `http_${status}`;
    this.requestId = problem?.requestId ?? requestId;
    this.errors = problem?.errors ?? [];
  }
}

/** 400: the request is malformed (a field, a header, the key). Not retried: the same request fails the same way. */
export class BadRequestError extends ApiError {
  override readonly name: string = 'BadRequestError';
}
/** 401: no key, or an unknown or revoked one. */
export class AuthenticationError extends ApiError {
  override readonly name: string = 'AuthenticationError';
}
/** 403: the key lacks the scope. */
export class PermissionDeniedError extends ApiError {
  override readonly name: string = 'PermissionDeniedError';
}
/** 404: no such job or attempt of this key's owner. */
export class NotFoundError extends ApiError {
  override readonly name: string = 'NotFoundError';
}
/** 409: the state refuses the request (job terminal, attempt in progress...). */
export class ConflictError extends ApiError {
  override readonly name: string = 'ConflictError';
}
/** 409 idempotency_key_reused: the key is bound to another intent. A new intent needs a new key. */
export class IdempotencyKeyReusedError extends ConflictError {
  override readonly name: string = 'IdempotencyKeyReusedError';
}
/** 413 and 415: the body is too large or not JSON. */
export class PayloadError extends ApiError {
  override readonly name: string = 'PayloadError';
}
/** 422: unknown operation or provider, or an input its schema refuses (`errors` name `input.<field>`). */
export class UnprocessableEntityError extends ApiError {
  override readonly name: string = 'UnprocessableEntityError';
}
/** 429: too many requests; retried with the same key until the attempts run out. */
export class RateLimitError extends ApiError {
  override readonly name: string = 'RateLimitError';
}
/** 5xx. 503 (and 502/504 from a gateway) are retried; 500 is a bug of the service and is not. */
export class ServerError extends ApiError {
  override readonly name: string = 'ServerError';
}

/** The request got no answer: connection refused or reset, DNS, or a response that was cut. */
export class NetworkError extends OnejobError {
  override readonly name: string = 'NetworkError';
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
  }
}

/** No answer within the client's `timeoutMs`. */
export class RequestTimeoutError extends NetworkError {
  override readonly name: string = 'RequestTimeoutError';
}

/** waitForJob's `timeoutMs` passed before the job was terminal: `job` is its last state. */
export class WaitTimeoutError extends OnejobError {
  override readonly name: string = 'WaitTimeoutError';
  constructor(readonly job: Job) {
    super(`job ${job.id} is still ${job.status}`);
  }
}

/** waitForBatch's deadline passed with jobs of the batch still live; `batch` is the last state read. */
export class BatchWaitTimeoutError extends OnejobError {
  override readonly name: string = 'BatchWaitTimeoutError';
  constructor(readonly batch: Batch) {
    super(`batch ${batch.id} still has ${batch.liveJobs} live jobs`);
  }
}

export function errorFor(status: number, problem: Problem | undefined, requestId: string | undefined): ApiError {
  switch (status) {
    case 400:
      return new BadRequestError(status, problem, requestId);
    case 401:
      return new AuthenticationError(status, problem, requestId);
    case 403:
      return new PermissionDeniedError(status, problem, requestId);
    case 404:
      return new NotFoundError(status, problem, requestId);
    case 409:
      return problem?.code === 'idempotency_key_reused'
        ? new IdempotencyKeyReusedError(status, problem, requestId)
        : new ConflictError(status, problem, requestId);
    case 413:
    case 415:
      return new PayloadError(status, problem, requestId);
    case 422:
      return new UnprocessableEntityError(status, problem, requestId);
    case 429:
      return new RateLimitError(status, problem, requestId);
    default:
      return status >= 500 ? new ServerError(status, problem, requestId) : new ApiError(status, problem, requestId);
  }
}
