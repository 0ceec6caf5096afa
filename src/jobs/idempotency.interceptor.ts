import { type CallHandler, type ExecutionContext, Injectable, type NestInterceptor } from '@nestjs/common';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { catchError, from, type Observable } from 'rxjs';

import { DomainError } from '../common/domain.errors.js';
import { isTerminal, type JobWithAttempts } from '../ledger/job.types.js';
import { DuplicateIdempotencyKeyError } from '../ledger/ledger.errors.js';
import { MetricsService } from '../metrics/metrics.service.js';
import { sendJob } from './job-reply.js';
import { IdempotencyKeyReusedError } from './jobs.errors.js';
import { JobsService } from './jobs.service.js';
import { clientGoneSignal, parsePreferWait } from './request-headers.js';

/**
 * The idempotency mapping (docs/design.md#4-http-api-all-under-v1-json), a Nest interceptor on a create route
 * (`@UseInterceptors(JobsIdempotency)`). The route INSERTs without a lookup first; a key it finds taken on the
 * owner-and-key constraint comes out of the ledger as DuplicateIdempotencyKeyError (the grouped INSERT skipped
 * it), and is answered here: for the same fingerprint, a replay of what the key holds (200,
 * `Idempotent-Replayed: true`, the body the route answers with); for another, 409 `idempotency_key_reused`. Every
 * other outcome passes untouched: a create that succeeds costs the interceptor pipeline's Observable and nothing
 * else (docs/benchmarks.md#the-idempotencyinterceptor). A route names what its key holds and how its replay reads
 * (JobsIdempotency, BatchesIdempotency in src/batches/); the route answers through its reply (`@Res()`), and so
 * does the replay.
 */
export abstract class IdempotencyInterceptor<Stored extends { fingerprint: string }> implements NestInterceptor {
  constructor(protected readonly metrics: MetricsService) {}

  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    return next.handle().pipe(
      catchError((error: unknown) => {
        if (!(error instanceof DuplicateIdempotencyKeyError)) throw error;
        const http = context.switchToHttp();
        return from(this.answer(error, http.getRequest<FastifyRequest>(), http.getResponse<FastifyReply>()));
      }),
    );
  }

  /** What the key holds now; undefined when the retention purge took it since the INSERT found it taken. */
  protected abstract find(ownerId: string, idempotencyKey: string): Promise<Stored | undefined>;

  /** The replay's answer: what the key holds, as the route's 200. */
  protected abstract replay(stored: Stored, request: FastifyRequest, reply: FastifyReply): Promise<void>;

  /** The 409 of another intent under the key. */
  protected abstract reused(): DomainError;

  /** The 503's message when the key's holder was purged between the INSERT and the replay's read. */
  protected abstract readonly purged: string;

  private async answer(duplicate: DuplicateIdempotencyKeyError, request: FastifyRequest, reply: FastifyReply) {
    const stored = await this.find(duplicate.ownerId, duplicate.idempotencyKey);
    if (!stored) throw new DomainError('service_unavailable', 503, this.purged);
    if (stored.fingerprint !== duplicate.fingerprint) {
      this.metrics.idempotencyConflicts.inc();
      throw this.reused();
    }
    await this.replay(stored, request, reply);
  }
}

/** POST /v1/jobs: a key holds a job; its replay is the job now, after `Prefer: wait` as a create's would be. */
@Injectable()
export class JobsIdempotency extends IdempotencyInterceptor<JobWithAttempts> {
  protected readonly purged = 'The job under this key was purged by retention just now; retry to create a new one.';

  constructor(
    metrics: MetricsService,
    private readonly jobs: JobsService,
  ) {
    super(metrics);
  }

  protected find(ownerId: string, idempotencyKey: string): Promise<JobWithAttempts | undefined> {
    return this.jobs.findByKey(ownerId, idempotencyKey);
  }

  protected reused(): DomainError {
    return new IdempotencyKeyReusedError();
  }

  protected async replay(job: JobWithAttempts, request: FastifyRequest, reply: FastifyReply): Promise<void> {
    this.metrics.jobsReplayed.inc();
    const wait = parsePreferWait(request.headers.prefer);
    const now =
      wait > 0 && !isTerminal(job.status)
        ? await this.jobs.findOwned(job.ownerId, job.id, wait, clientGoneSignal(reply))
        : job;
    sendJob(reply, 200, now, { replayed: true, waited: wait });
  }
}
