import { CallHandler, ExecutionContext, Injectable, NestInterceptor } from '@nestjs/common';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { catchError, from, Observable, throwError } from 'rxjs';
import { sendJob } from './job-reply.js';
import { DuplicateIdempotencyKeyError } from '../ledger/ledger.errors.js';
import { JobsService } from './jobs.service.js';
import { clientGoneSignal, parsePreferWait } from './request-headers.js';

/**
 * Owns the idempotency mapping (docs/design.md#4-http-api-all-under-v1-json). The service does a plain INSERT; when it collides on
 * UQ_jobs_owner_idempotency_key, this loads the existing job and answers 200 + Idempotent-Replayed for the
 * same fingerprint, or 409 idempotency_key_reused for another.
 */
@Injectable()
export class IdempotencyInterceptor implements NestInterceptor {
  constructor(private readonly jobs: JobsService) {}

  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const http = context.switchToHttp();
    return next.handle().pipe(
      catchError((error: unknown) => {
        if (!(error instanceof DuplicateIdempotencyKeyError)) return throwError(() => error);
        const wait = parsePreferWait(http.getRequest<FastifyRequest>().headers.prefer);
        return from(
          this.jobs.replay(error.ownerId, error.idempotencyKey, error.fingerprint, wait, wait ? clientGoneSignal(http.getResponse<FastifyReply>()) : undefined).then((job) =>
            sendJob(http.getResponse<FastifyReply>(), 200, job, { replayed: true, waited: wait }),
          ),
        );
      }),
    );
  }
}
