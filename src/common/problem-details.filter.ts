import { randomUUID } from 'node:crypto';
import type { Socket } from 'node:net';

import { ArgumentsHost, Catch, ExceptionFilter, HttpException, Logger } from '@nestjs/common';
import type { FastifyReply, FastifyRequest } from 'fastify';

import { isDatabaseUnavailable } from '../database/pg-errors.js';
import { DomainError, type ErrorCode, type FieldError, ValidationFailedError } from './domain.errors.js';
import { safeErrorFields } from './log-safe.js';

export interface Problem {
  type: string;
  title: string;
  status: number;
  detail: string;
  instance: string;
  code: ErrorCode;
  requestId: string;
  errors?: FieldError[];
  /** How many more field errors were found than `errors` lists (ValidationFailedError caps the list). */
  errorsOmitted?: number;
}

export const PROBLEM_TITLES: Record<ErrorCode, string> = {
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
  provider_paused: 'Provider paused by its rate limit',
  webhook_disabled: 'The webhook endpoint is disabled',
  webhook_endpoint_limit: 'Webhook endpoint limit reached',
  webhook_rotation_limit: 'Too many secret rotations in progress',
  budget_exceeded: 'Monthly budget exceeded',
  not_found: 'Not found',
  unauthorized: 'Unauthorized',
  key_revoked: 'API key revoked',
  token_expired: 'Credential expired',
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
  errorsOmitted?: number;
  retryAfterSeconds?: number;
}

function classify(exception: unknown): Classified | undefined {
  if (exception instanceof DomainError) {
    const errors = exception.errors.length ? exception.errors : undefined;
    const errorsOmitted =
      exception instanceof ValidationFailedError && exception.errorsOmitted ? exception.errorsOmitted : undefined;
    return {
      status: exception.status,
      code: exception.code,
      detail: exception.message,
      errors,
      errorsOmitted,
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

/**
 * Renders every error as RFC 9457 problem+json. Anything unclassified is a bug: an opaque 500, logged by class,
 * code, sanitized message and stack frames. Never the error object itself: TypeORM's QueryFailedError carries
 * the SQL and its parameters, which hold job input and results.
 */
@Catch()
export class ProblemDetailsFilter implements ExceptionFilter {
  private readonly logger = new Logger('ProblemDetails');

  catch(exception: unknown, host: ArgumentsHost): void {
    const http = host.switchToHttp();
    const request = http.getRequest<FastifyRequest>();
    const reply = http.getResponse<FastifyReply>();
    const classified = classify(exception);
    if (!classified) {
      this.logger.error({
        msg: 'unhandled error',
        requestId: request.id,
        ...safeErrorFields(exception, { stack: true }),
      });
    } else if (classified.status === 503) {
      this.logger.warn({ msg: 'database unavailable', requestId: request.id, ...safeErrorFields(exception) });
    }
    sendProblem(
      request,
      reply,
      classified ?? { status: 500, code: 'internal_error', detail: 'An unexpected error occurred.' },
    );
  }
}

/** Writes one RFC 9457 problem: the filter's answers and Fastify's own routing refusals (frameworkErrors). */
export function sendProblem(request: FastifyRequest, reply: FastifyReply, classified: Classified): void {
  const { status, code, detail, errors, errorsOmitted, retryAfterSeconds } = classified;
  const problem: Problem = {
    type: `urn:onejob:problem:${code}`,
    title: PROBLEM_TITLES[code],
    status,
    detail,
    instance: request.url?.split('?')[0] ?? '',
    code,
    requestId: String(request.id),
    ...(errors ? { errors } : {}),
    ...(errorsOmitted ? { errorsOmitted } : {}),
  };
  if (reply.sent) return;
  if (status === 503) void reply.header('Retry-After', String(RETRY_AFTER_SECONDS));
  if (retryAfterSeconds !== undefined) void reply.header('Retry-After', String(retryAfterSeconds));
  if (status === 401) void reply.header('WWW-Authenticate', 'Bearer');
  // Also set by app.setup.ts's first hook; a refusal Fastify makes before the hooks run (a malformed path) has it too.
  void reply.header('X-Content-Type-Options', 'nosniff');
  void reply
    .status(status)
    .header('Content-Type', 'application/problem+json; charset=utf-8')
    .send(JSON.stringify(problem));
}

const parserRefusals: Record<string, { status: number; reason: string; detail: string }> = {
  HPE_HEADER_OVERFLOW: {
    status: 431,
    reason: 'Request Header Fields Too Large',
    detail: 'The request headers are too large.',
  },
  ERR_HTTP_REQUEST_TIMEOUT: { status: 408, reason: 'Request Timeout', detail: 'The request was not received in time.' },
};

/**
 * Fastify's clientErrorHandler: Node's HTTP parser refused the bytes (a NUL in a header, a broken chunk), so
 * there is no request to reply to, only the socket. The answer is the same problem+json as every other refusal.
 */
export function writeParserProblem(error: Error & { code?: string }, socket: Socket): void {
  if (error.code === 'ECONNRESET' || !socket.writable) return void socket.destroy();
  const refusal = parserRefusals[error.code ?? ''] ?? {
    status: 400,
    reason: 'Bad Request',
    detail: 'The request is not well-formed HTTP.',
  };
  const problem: Problem = {
    type: 'urn:onejob:problem:validation_failed',
    title: PROBLEM_TITLES.validation_failed,
    status: refusal.status,
    detail: refusal.detail,
    instance: '',
    code: 'validation_failed',
    requestId: randomUUID(),
  };
  const body = JSON.stringify(problem);
  socket.end(
    `HTTP/1.1 ${refusal.status} ${refusal.reason}\r\nContent-Type: application/problem+json; charset=utf-8\r\n` +
      `Content-Length: ${Buffer.byteLength(body)}\r\nX-Request-Id: ${problem.requestId}\r\n` +
      'X-Content-Type-Options: nosniff\r\n' +
      `Connection: close\r\n\r\n${body}`,
  );
}
