import { Injectable } from '@nestjs/common';

import type { Principal } from '../auth/scopes.js';
import { ProviderCapacity } from '../capacity/provider-capacity.js';
import {
  NotFoundError,
  ProviderNotCertifiedError,
  ProviderPausedError,
  UnknownProviderError,
} from '../common/domain.errors.js';
import { AttemptsRepository } from '../ledger/attempts.repository.js';
import { isTerminal, type JobWithAttempts } from '../ledger/job.types.js';
import { JobsRepository } from '../ledger/jobs.repository.js';
import { AttemptNotUnknownError, JobTerminalError } from '../ledger/ledger.errors.js';
import { LedgerFactory } from '../ledger/ledger.js';
import { CatalogService } from '../providers/catalog.service.js';
import { CertificationService } from '../providers/certification.service.js';
import { AttemptScheduler } from './attempt-scheduler.js';

/** The API's side of attempts: asking for one now, and resolving an unknown one out of band. */
@Injectable()
export class AttemptsService {
  constructor(
    private readonly ledgers: LedgerFactory,
    private readonly jobs: JobsRepository,
    private readonly attempts: AttemptsRepository,
    private readonly catalog: CatalogService,
    private readonly certification: CertificationService,
    private readonly scheduler: AttemptScheduler,
    private readonly capacity: ProviderCapacity,
  ) {}

  /**
   * Queues an attempt for a worker (no provider is called here). I3's index answers 409 while one is live. A named
   * provider must be the job's primary or certified now (I6): asking cannot bypass certification. Nor can it bypass
   * a provider's pause (its own 429): 409 provider_paused with Retry-After, rather than an attempt that would sit
   * queued (and hold the job's one live slot) until the pause ends. Read before the transaction, so no connection
   * is held waiting for another; one queued as a pause begins waits for its end in the worker.
   */
  async request(ownerId: string, jobId: string, provider?: string): Promise<JobWithAttempts> {
    const pauses = await this.capacity.pauses();
    await this.ledgers.run(async (ledger) => {
      const job = await ledger.lockOwnedJob(ownerId, jobId);
      if (!job) throw new NotFoundError('Job');
      if (isTerminal(job.status)) throw new JobTerminalError(job.status);
      if (provider !== undefined && !job.providers.includes(provider)) {
        throw new UnknownProviderError('provider', provider, "is not in the job's provider chain");
      }
      const plan = await this.scheduler.plan(job, await ledger.listAttempts(job.id));
      const chosen = provider ?? (plan.kind === 'attempt' || plan.kind === 'defer' ? plan.provider : job.providers[0]);
      const spec = this.catalog.provider(chosen);
      if (!spec) throw new UnknownProviderError('provider', chosen, 'is not in the catalog');
      if (chosen !== job.providers[0] && !(await this.certification.isCertified(chosen, job.operation))) {
        throw new ProviderNotCertifiedError(chosen, job.operation);
      }
      const pausedForMs = pauses.get(chosen);
      if (pausedForMs !== undefined) throw new ProviderPausedError(chosen, pausedForMs);
      await ledger.insertAttempt(
        {
          jobId: job.id,
          provider: chosen,
          jobVersion: job.version,
          timeoutMs: spec.timeoutMs,
          hardTimeoutMs: spec.hardTimeoutMs,
          workerId: null,
        },
        'requested_by_owner',
      );
      await ledger.moveJob(job, job.status, 'attempt_requested', 0);
    });
    return (await this.jobs.findOwnedById(ownerId, jobId))!;
  }

  /**
   * An operator settles what the service could not know: the unknown attempt failed, or we stop waiting for it.
   * `attempts:resolve` is an operator scope and acts on any owner's attempt (I7); every transition it causes is
   * recorded with the acting key.
   */
  async resolve(
    actor: Principal,
    attemptId: string,
    status: 'failed' | 'cancelled',
    reason: string,
  ): Promise<JobWithAttempts> {
    const jobId = await this.attempts.findJobId(null, attemptId);
    if (!jobId) throw new NotFoundError('Attempt');
    const ownerId = await this.ledgers.run(async (ledger) => {
      ledger.actAs(actor.actor);
      const { job, attempt } = (await ledger.lockPair(jobId, attemptId))!;
      if (attempt.status !== 'unknown') throw new AttemptNotUnknownError(attempt.status);
      const error = { reason: 'resolved_by_operator', message: reason };
      await ledger.moveAttempt(attempt, status, 'resolved_by_operator', {
        error,
        finished: true,
        resolvedBy: 'operator',
      });
      await this.scheduler.scheduleAfter(ledger, job, attempt.jobVersion, 'attempt_resolved');
      return job.ownerId;
    });
    return (await this.jobs.findOwnedById(ownerId, jobId))!;
  }
}
