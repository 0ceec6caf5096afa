import { ArgumentsHost, Catch, ExceptionFilter, HttpException, Logger } from '@nestjs/common';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { isDatabaseUnavailable } from '../database/pg-errors.js';
import { DomainError, type ErrorCode, type FieldError } from './domain.errors.js';

export interface Problem {
  type: string;
  title: string;
  status: number;
  detail: string;
  instance: string;
  code: ErrorCode;
  requestId: string;
  errors?: FieldError[];
}

const titles: Record<ErrorCode, string> = {
  idempotency_key_missing: 'Idempotency-Key header missing',
  idempotency_key_invalid: 'Idempotency-Key header invalid',
  idempotency_key_reused: 'Idempotency-Key reused with another request',
  attempt_in_progress: 'An attempt is in progress',
  attempt_not_unknown: 'The attempt is not unknown',
  job_terminal: 'The job is terminal',
  validation_failed: 'Validation failed',
  unknown_operation: 'Unknown operation',
  unknown_provider: 'Unknown provider',
  provider_not_certified: 'Provider not certified',
  webhook_disabled: 'The webhook endpoint is disabled',
  budget_exceeded: 'Monthly budget exceeded',
  not_found: 'Not found',
  unauthorized: 'Unauthorized',
  forbidden: 'Forbidden',
  payload_too_large: 'Payload too large',
  unsupported_media_type: 'Unsupported media type',
  service_unavailable: 'Service unavailable',
  internal_error: 'Internal server error',
};

const codeByStatus: Record<number, ErrorCode> = {
  400: 'validation_failed',
  401: 'unauthorized',
  403: 'forbidden',
  404: 'not_found',
  405: 'not_found',
  413: 'payload_too_large',
  415: 'unsupported_media_type',
  422: 'validation_failed',
  503: 'service_unavailable',
};

export const RETRY_AFTER_SECONDS = 2;

export interface Classified {
  status: number;
  code: ErrorCode;
  detail: string;
  errors?: FieldError[];
  retryAfterSeconds?: number;
}

function classify(exception: unknown): Classified | undefined {
  if (exception instanceof DomainError) {
    return {
      status: exception.status,
      code: exception.code,
      detail: exception.message,
      errors: exception.errors.length ? exception.errors : undefined,
      retryAfterSeconds: exception.retryAfterSeconds,
    };
  }
  if (exception instanceof HttpException) {
    const status = exception.getStatus();
    const code = codeByStatus[status];
    if (!code) return undefined;
    // Fastify's own refusals (malformed JSON, body too large) arrive as HttpExceptions with a useful message.
    const detail = status === 404 ? 'No such resource.' : exception.message;
    return { status, code, detail };
  }
  if (isDatabaseUnavailable(exception)) {
    return { status: 503, code: 'service_unavailable', detail: 'The database is unreachable; retry later.' };
  }
  const status = (exception as { statusCode?: unknown })?.statusCode;
  if (typeof status === 'number' && codeByStatus[status] && status < 500) {
    return { status, code: codeByStatus[status], detail: (exception as Error).message };
  }
  return undefined;
}

/** Renders every error as RFC 9457 problem+json. Anything unclassified is a bug: an opaque 500, logged whole. */
@Catch()
export class ProblemDetailsFilter implements ExceptionFilter {
  private readonly logger = new Logger('ProblemDetails');

  catch(exception: unknown, host: ArgumentsHost): void {
    const http = host.switchToHttp();
    const request = http.getRequest<FastifyRequest>();
    const reply = http.getResponse<FastifyReply>();
    const classified = classify(exception);
    if (!classified) {
      this.logger.error({ msg: 'unhandled error', requestId: request.id, err: exception }, (exception as Error)?.stack);
    } else if (classified.status === 503) {
      this.logger.warn({ msg: 'database unavailable', requestId: request.id, error: (exception as Error)?.message });
    }
    sendProblem(request, reply, classified ?? { status: 500, code: 'internal_error', detail: 'An unexpected error occurred.' });
  }
}

/** Writes one RFC 9457 problem: the filter's answers and Fastify's own routing refusals (frameworkErrors). */
export function sendProblem(request: FastifyRequest, reply: FastifyReply, { status, code, detail, errors, retryAfterSeconds }: Classified): void {
  const problem: Problem = {
    type: `urn:onejob:problem:${code}`,
    title: titles[code],
    status,
    detail,
    instance: request.url?.split('?')[0] ?? '',
    code,
    requestId: String(request.id),
    ...(errors ? { errors } : {}),
  };
  if (reply.sent) return;
  if (status === 503) void reply.header('Retry-After', String(RETRY_AFTER_SECONDS));
  if (retryAfterSeconds !== undefined) void reply.header('Retry-After', String(retryAfterSeconds));
  if (status === 401) void reply.header('WWW-Authenticate', 'Bearer');
  void reply.status(status).header('Content-Type', 'application/problem+json; charset=utf-8').send(JSON.stringify(problem));
}
