import { createParamDecorator, ExecutionContext } from '@nestjs/common';
import type { FastifyReply } from 'fastify';

import { IdempotencyKeyInvalidError, IdempotencyKeyMissingError } from './jobs.errors.js';

type Headers = Record<string, string | string[] | undefined>;
const headersOf = (context: ExecutionContext) => context.switchToHttp().getRequest<{ headers: Headers }>().headers;

export const MAX_WAIT_SECONDS = 30;
export const MAX_IDEMPOTENCY_KEY_LENGTH = 255;
const VISIBLE_ASCII = /^[\x21-\x7e]+$/;

/** Validates the Idempotency-Key header: 1 to 255 visible ASCII characters. */
export function parseIdempotencyKey(value: string | string[] | undefined): string {
  if (value === undefined) throw new IdempotencyKeyMissingError();
  if (Array.isArray(value)) throw new IdempotencyKeyInvalidError('must be sent once');
  if (value.length === 0) throw new IdempotencyKeyInvalidError('must not be empty');
  if (value.length > MAX_IDEMPOTENCY_KEY_LENGTH) {
    throw new IdempotencyKeyInvalidError(`must be at most ${MAX_IDEMPOTENCY_KEY_LENGTH} characters`);
  }
  if (!VISIBLE_ASCII.test(value)) {
    throw new IdempotencyKeyInvalidError('must be visible ASCII characters only (0x21-0x7E)');
  }
  return value;
}

/** `Prefer: wait=N` (RFC 7240): seconds to hold the answer until the job is terminal, at most 30. 0 when absent. */
export function parsePreferWait(value: string | string[] | undefined): number {
  const header = Array.isArray(value) ? value.join(',') : value;
  if (!header) return 0;
  const match = /(?:^|[,;\s])wait\s*=\s*"?(\d{1,6})"?/i.exec(header);
  return match ? Math.min(Number(match[1]), MAX_WAIT_SECONDS) : 0;
}

export const IdempotencyKey = createParamDecorator((_: unknown, context: ExecutionContext) =>
  parseIdempotencyKey(headersOf(context)['idempotency-key']),
);

export const PreferWait = createParamDecorator((_: unknown, context: ExecutionContext) =>
  parsePreferWait(headersOf(context).prefer),
);

/** Aborts when the client closes the connection before its answer was written: a long-poll then stops at once. */
export function clientGoneSignal(reply: FastifyReply): AbortSignal {
  const controller = new AbortController();
  const raw = reply.raw;
  const onClose = () => {
    if (!raw.writableFinished) controller.abort();
  };
  // The client may have left while the guard or pipes awaited: 'close' then fired before we listened.
  if (raw.destroyed && !raw.writableFinished) controller.abort();
  else raw.once('close', onClose);
  return controller.signal;
}
