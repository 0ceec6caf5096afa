import { Injectable } from '@nestjs/common';
import type { FastifyReply, FastifyRequest } from 'fastify';

import { DomainError } from '../common/domain.errors.js';
import { isTerminal, type JobWithAttempts } from '../ledger/job.types.js';
import { DuplicateIdempotencyKeyError } from '../ledger/ledger.errors.js';
import { MetricsService } from '../metrics/metrics.service.js';
import { sendJob } from './job-reply.js';
import { IdempotencyKeyReusedError } from './jobs.errors.js';
import { JobsService } from './jobs.service.js';
import { clientGoneSignal, parsePreferWait } from './request-headers.js';

/**
 * The idempotency mapping (docs/design.md#4-http-api-all-under-v1-json), on a create route. The route INSERTs
 * without a lookup first; a key it finds taken on the owner-and-key constraint comes out of the ledger as
 * DuplicateIdempotencyKeyError (the grouped INSERT skipped it), and is answered here: for the same fingerprint, a
 * replay of what the key holds (200, `Idempotent-Replayed: true`, the body the route answers with); for another,
 * 409 `idempotency_key_reused`. Every other outcome passes untouched, and a create that succeeds costs no more
 * than the handler's own promise. A route names what its key holds and how its replay reads (JobsIdempotency,
 * BatchesIdempotency in src/batches/).
 */
export abstract class IdempotencyInterceptor<Stored extends { fingerprint: string }> {
  constructor(protected readonly metrics: MetricsService) {}

  /**
   * The mapping around a route's create, called by the route itself rather than attached with `@UseInterceptors`:
   * the same interception without Nest's interceptor pipeline, which wraps every request of the route in
   * Observables (docs/benchmarks.md#the-idempotencyinterceptor).
   */
  async around(reply: FastifyReply, create: () => Promise<void>): Promise<void> {
    try {
      await create();
    } catch (error) {
      if (!(error instanceof DuplicateIdempotencyKeyError)) throw error;
      await this.answer(error, reply.request, reply);
    }
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
