import { type CallHandler, type ExecutionContext, Injectable, type NestInterceptor } from '@nestjs/common';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { catchError, from, lastValueFrom, type Observable, throwError } from 'rxjs';

import { requestDeadline, retryAllowed, retryWithin } from './request-context.js';
import { failedBeforeCommit } from './transactions.js';

/**
 * A read whose connection died under it (a failover ends the old primary's sessions, docs/operations.md#failover)
 * failed before anything could commit: its handler runs once more, on a fresh connection, 250 ms later, when what
 * is left of the request's DB_REQUEST_TIMEOUT_MS allows it, so the client gets its answer instead of a 503. Only
 * GET and HEAD, whose handlers write nothing; never once an answer has begun (a live stream's headers are out).
 * Writes have their own rule (inTransaction, the grouped creates and settlements): a lost COMMIT is read back,
 * never run again blind.
 */
@Injectable()
export class ReadRetryInterceptor implements NestInterceptor {
  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const http = context.switchToHttp();
    const { method } = http.getRequest<FastifyRequest>();
    if (method !== 'GET' && method !== 'HEAD') return next.handle();
    const reply = http.getResponse<FastifyReply>();
    const deadline = requestDeadline(Date.now());
    return next
      .handle()
      .pipe(
        catchError((error: unknown) =>
          failedBeforeCommit(error) && retryAllowed(deadline) && !reply.raw.headersSent
            ? from(retryWithin(deadline, () => lastValueFrom(next.handle(), { defaultValue: undefined })))
            : throwError(() => error),
        ),
      );
  }
}
