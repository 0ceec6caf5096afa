import { randomUUID } from 'node:crypto';
import { Wakeup } from '../common/wakeup.js';
import { safeErrorFields } from '../common/log-safe.js';
import { hostname } from 'node:os';
import { Inject, Injectable, Logger, type BeforeApplicationShutdown, type OnApplicationBootstrap } from '@nestjs/common';
import { appConfig, type AppConfig } from '../config/app.config.js';
import { isDatabaseUnavailable } from '../database/pg-errors.js';
import type { ClaimedStart } from '../ledger/attempts.repository.js';
import { NOT_SENT, type Attempt } from '../ledger/attempt.types.js';
import { JobSignals } from '../ledger/job-signals.js';
import type { JobWithAttempts } from '../ledger/job.types.js';
import { LedgerFactory, type Ledger } from '../ledger/ledger.js';
import { CatalogService } from '../providers/catalog.service.js';
import { inJobTrace } from '../telemetry/tracing.js';
import { AttemptRunner, type Claimed } from './attempt-runner.js';
import { AttemptScheduler } from './attempt-scheduler.js';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Jobs one claim transaction takes at most: enough to fill a large window in a few round trips. */
const CLAIM_BATCH = 64;

/**
 * Claims jobs that need an attempt and runs them, up to WORKER_CONCURRENCY at once. Any number of workers, in
 * any number of processes, share one database: one claim transaction takes up to CLAIM_BATCH due jobs with
 * FOR UPDATE SKIP LOCKED and inserts their attempts (`starting`) in one statement, and it commits before any
 * provider call. The loop claims again as soon as the window has room; it sleeps only when nothing is due, and
 * wakes on NOTIFY (a job created or rescheduled anywhere), on a finished attempt, or after WORKER_POLL_MS.
 */
@Injectable()
export class AttemptWorker implements OnApplicationBootstrap, BeforeApplicationShutdown {
  readonly workerId = `${hostname()}:${process.pid}:${randomUUID().slice(0, 8)}`;
  private readonly logger = new Logger(AttemptWorker.name);
  private readonly inFlight = new Set<Promise<void>>();
  private readonly shutdown = new AbortController();
  private stopping = false;
  private loop?: Promise<void>;
  private readonly wakeup = new Wakeup();
  private unsubscribe?: () => void;

  constructor(
    @Inject(appConfig.KEY) private readonly config: AppConfig,
    private readonly ledgers: LedgerFactory,
    private readonly scheduler: AttemptScheduler,
    private readonly catalog: CatalogService,
    private readonly runner: AttemptRunner,
    private readonly signals: JobSignals,
  ) {}

  onApplicationBootstrap(): void {
    if (this.config.role === 'api') return;
    this.unsubscribe = this.signals.onDue(() => this.poke());
    this.loop = this.claimLoop();
  }

  /** SIGTERM: stop claiming, give in-flight attempts SHUTDOWN_GRACE_MS, then abort them (they become `unknown`). */
  async beforeApplicationShutdown(): Promise<void> {
    this.stopping = true;
    this.unsubscribe?.();
    this.poke();
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

  /** Attempts running in this process now. */
  get inFlightCount(): number {
    return this.inFlight.size;
  }

  private async claimLoop(): Promise<void> {
    // A claim costs a transaction however few jobs it takes: while calls are in flight, wait until a useful
    // batch of slots is free (each finished call wakes the loop) instead of claiming one job per finished call.
    const worthClaiming = Math.min(CLAIM_BATCH, Math.max(1, Math.floor(this.config.workerConcurrency / 8)));
    while (!this.stopping) {
      const room = this.config.workerConcurrency - this.inFlight.size;
      if (room <= 0 || (room < worthClaiming && this.inFlight.size > 0)) {
        await this.idle(this.config.workerPollMs);
        continue;
      }
      let claimed: Claimed[];
      const claimStartedAt = Date.now();
      try {
        claimed = await this.claimBatch(Math.min(room, CLAIM_BATCH));
      } catch (error) {
        if (!isDatabaseUnavailable(error)) this.logger.error({ msg: 'claim failed', ...safeErrorFields(error) });
        await this.idle(this.config.workerPollMs * 5);
        continue;
      }
      if (claimed.length) this.launch(claimed, claimStartedAt);
      // A short batch means nothing more is due now: sleep until woken. A full one: claim again at once.
      if (claimed.length < Math.min(room, CLAIM_BATCH)) await this.idle(this.config.workerPollMs);
    }
  }

  private launch(claimed: Claimed[], claimStartedAt: number): void {
    const ready = this.runner.begin(claimed);
    for (const { job, attempt } of claimed) {
      const run = ready
        .then((batch) => {
          const one = batch.get(attempt.id);
          const info = { jobId: job.id, attemptId: attempt.id, provider: attempt.provider, claimStartedAt };
          return one && inJobTrace(job, info, () => this.runner.call(one, this.shutdown.signal));
        })
        .catch((error: Error) => this.logger.error({ msg: 'attempt run failed; the reconciler will find it', jobId: job.id, attemptId: attempt.id, ...safeErrorFields(error) }))
        .finally(() => {
          this.inFlight.delete(run);
          this.poke();
        });
      this.inFlight.add(run);
    }
  }

  private poke(): void {
    this.wakeup.poke();
  }

  private idle(ms: number): Promise<void> {
    return this.wakeup.idle(ms);
  }

  /**
   * One claim transaction: lock up to `limit` due jobs, plan each, insert every new attempt (and mark the jobs
   * running, with events) in one statement. A job whose plan fails is skipped and logged, never retried first
   * forever: a poison job must not block the others.
   */
  async claimBatch(limit: number): Promise<Claimed[]> {
    return this.ledgers.run(async (ledger) => {
      const jobs = await ledger.claimDue(limit);
      const starts: ClaimedStart[] = [];
      const claimed: Claimed[] = [];
      for (const job of jobs) {
        try {
          const taken = await this.claimOne(ledger, job, starts);
          if (taken) claimed.push({ job, attempt: taken });
        } catch (error) {
          this.logger.error({ msg: 'claim of one job failed; skipped', jobId: job.id, ...safeErrorFields(error) });
        }
      }
      const inserted = await ledger.startClaimed(starts);
      const byJob = new Map(jobs.map((j) => [j.id, j]));
      for (const attempt of inserted) claimed.push({ job: byJob.get(attempt.jobId)!, attempt });
      for (const { job } of claimed) job.status = 'running';
      return claimed;
    });
  }

  /** Plans one locked job: returns a queued attempt taken over, or pushes a new one onto `starts`. */
  private async claimOne(ledger: Ledger, job: JobWithAttempts, starts: ClaimedStart[]): Promise<Attempt | undefined> {
    const queued = job.attempts.find((a) => a.status === 'starting' && a.claimedAt === null);
    if (queued) {
      const spec = this.catalog.provider(queued.provider);
      if (!spec) {
        // The provider left the catalog while the attempt waited: it was never sent.
        await ledger.moveAttempt(queued, 'failed', NOT_SENT, {
          error: { reason: 'provider_unavailable', message: `Provider ${queued.provider} is not in the catalog.`, retryable: false },
          finished: true,
        });
        await this.scheduler.scheduleAfter(ledger, job, job.version, 'provider_unavailable');
        return undefined;
      }
      const attempt = await ledger.claimQueued(queued, this.workerId, spec.timeoutMs, spec.hardTimeoutMs);
      if (attempt) await ledger.moveJob(job, 'running', 'attempt_started', null);
      return attempt;
    }
    const plan = await this.scheduler.plan(job, job.attempts);
    if (plan.kind === 'exhausted') {
      await this.scheduler.settleExhausted(ledger, job, job.version, plan);
      return undefined;
    }
    if (plan.kind === 'wait') {
      // A live attempt exists (its end schedules the next), or the job succeeded: clear the schedule.
      await ledger.moveJob(job, job.status, 'nothing_to_start', null);
      return undefined;
    }
    const spec = this.catalog.provider(plan.provider)!;
    starts.push({ jobId: job.id, provider: plan.provider, jobVersion: job.version, timeoutMs: spec.timeoutMs, hardTimeoutMs: spec.hardTimeoutMs, workerId: this.workerId, jobFrom: job.status });
    return undefined;
  }
}
