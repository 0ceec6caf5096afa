import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import { Inject, Injectable, Logger, type BeforeApplicationShutdown, type OnApplicationBootstrap } from '@nestjs/common';
import { appConfig, type AppConfig } from '../config/app.config.js';
import { isDatabaseUnavailable } from '../database/pg-errors.js';
import type { Job } from '../jobs/job.types.js';
import { CatalogService } from '../providers/catalog.service.js';
import { LedgerFactory } from '../settlement/ledger.js';
import { inJobTrace } from '../telemetry/tracing.js';
import type { Attempt } from './attempt.types.js';
import { AttemptRunner } from './attempt-runner.js';
import { AttemptScheduler } from './attempt-scheduler.js';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Claims jobs that need an attempt and runs them, up to WORKER_CONCURRENCY at once. Any number of workers,
 * in any number of processes, share one database: claims use FOR UPDATE SKIP LOCKED, and the attempt is
 * inserted (`starting`, with its deadline) in the claim's transaction, which commits before the provider call.
 */
@Injectable()
export class AttemptWorker implements OnApplicationBootstrap, BeforeApplicationShutdown {
  readonly workerId = `${hostname()}:${process.pid}:${randomUUID().slice(0, 8)}`;
  private readonly logger = new Logger(AttemptWorker.name);
  private readonly inFlight = new Set<Promise<void>>();
  private readonly shutdown = new AbortController();
  private stopping = false;
  private loop?: Promise<void>;
  private wake?: () => void;

  constructor(
    @Inject(appConfig.KEY) private readonly config: AppConfig,
    private readonly ledgers: LedgerFactory,
    private readonly scheduler: AttemptScheduler,
    private readonly catalog: CatalogService,
    private readonly runner: AttemptRunner,
  ) {}

  onApplicationBootstrap(): void {
    if (this.config.role === 'api') return;
    this.loop = this.claimLoop();
  }

  /** SIGTERM: stop claiming, give in-flight attempts SHUTDOWN_GRACE_MS, then abort them (they become `unknown`). */
  async beforeApplicationShutdown(): Promise<void> {
    this.stopping = true;
    this.wake?.();
    await this.loop;
    if (this.inFlight.size) {
      const grace = sleep(this.config.shutdownGraceMs).then(() => 'timeout' as const);
      if ((await Promise.race([Promise.all(this.inFlight).then(() => 'done' as const), grace])) === 'timeout') {
        this.logger.warn({ msg: 'shutdown grace over: aborting in-flight attempts', count: this.inFlight.size });
        this.shutdown.abort();
        await Promise.allSettled(this.inFlight);
      }
    }
  }

  private async claimLoop(): Promise<void> {
    while (!this.stopping) {
      if (this.inFlight.size >= this.config.workerConcurrency) {
        await this.idle(this.config.workerPollMs);
        continue;
      }
      let claimed: { job: Job; attempt: Attempt } | undefined;
      const claimStartedAt = Date.now();
      try {
        claimed = await this.claimNext();
      } catch (error) {
        if (!isDatabaseUnavailable(error)) this.logger.error({ msg: 'claim failed', error: (error as Error).message });
        await this.idle(this.config.workerPollMs * 5);
        continue;
      }
      if (!claimed) {
        await this.idle(this.config.workerPollMs);
        continue;
      }
      const { job, attempt } = claimed;
      const run = inJobTrace(job, { jobId: job.id, attemptId: attempt.id, provider: attempt.provider, claimStartedAt }, () => this.runner.run(job, attempt, this.shutdown.signal))
        .catch((error: Error) => this.logger.error({ msg: 'attempt run failed; the reconciler will find it', jobId: job.id, attemptId: attempt.id, error: error.message }))
        .finally(() => {
          this.inFlight.delete(run);
          this.wake?.();
        });
      this.inFlight.add(run);
    }
  }

  private idle(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(done, ms);
      function done() {
        clearTimeout(timer);
        resolve();
      }
      this.wake = done;
    });
  }

  /** One claim transaction: lock a due job, take its queued attempt or plan and insert one, mark the job running. */
  async claimNext(): Promise<{ job: Job; attempt: Attempt } | undefined> {
    return this.ledgers.run(async (ledger) => {
      const job = await ledger.claimDueJob();
      if (!job) return undefined;
      const attempts = await ledger.listAttempts(job.id);
      const queued = attempts.find((a) => a.status === 'starting' && a.claimedAt === null);
      let attempt: Attempt | undefined;
      if (queued) {
        const spec = this.catalog.provider(queued.provider)!;
        attempt = await ledger.claimQueued(queued, this.workerId, spec.timeoutMs, spec.hardTimeoutMs);
      } else {
        const plan = await this.scheduler.plan(job, attempts);
        if (plan.kind === 'exhausted') {
          await this.scheduler.settleExhausted(ledger, job, job.version, plan.lastError);
          return undefined;
        }
        if (plan.kind === 'attempt') {
          const spec = this.catalog.provider(plan.provider)!;
          attempt = await ledger.insertAttempt(
            { jobId: job.id, provider: plan.provider, jobVersion: job.version, timeoutMs: spec.timeoutMs, hardTimeoutMs: spec.hardTimeoutMs, workerId: this.workerId },
            'claimed',
          );
        }
      }
      // A live attempt (or nothing to do): clear the schedule; whoever ends that attempt schedules the next.
      await ledger.moveJob(job, attempt ? 'running' : job.status, attempt ? 'attempt_started' : 'nothing_to_start', null);
      return attempt && { job, attempt };
    });
  }
}
