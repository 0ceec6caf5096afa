import { Injectable, Logger } from '@nestjs/common';
import { DataSource, type EntityManager } from 'typeorm';
import { assertAttemptTransition, assertJobTransition } from '../attempts/attempt-state.js';
import type { Attempt, AttemptStatus } from '../attempts/attempt.types.js';
import { AttemptsRepository, type AttemptUpdate, type NewAttempt } from '../attempts/attempts.repository.js';
import { JobEventsRepository, type JobEvent } from '../jobs/job-events.repository.js';
import { JobWatch } from '../jobs/job-watch.js';
import type { Job, JobStatus } from '../jobs/job.types.js';
import { JobsRepository } from '../jobs/jobs.repository.js';
import { MetricsService } from '../metrics/metrics.service.js';

/**
 * One transaction over jobs and attempts. Every transition is checked against the state machine, written,
 * and appended to job_events in the same transaction; metrics, logs and wake-ups run only after commit.
 * Lock order is always job row, then attempt row.
 */
export class Ledger {
  readonly events: JobEvent[] = [];
  private readonly effects: Array<() => void> = [];

  constructor(
    readonly manager: EntityManager,
    private readonly jobs: JobsRepository,
    private readonly attempts: AttemptsRepository,
    private readonly metrics: MetricsService,
    private readonly watch: JobWatch,
  ) {}

  lockJob(jobId: string): Promise<Job | undefined> {
    return this.jobs.lockById(jobId, this.manager);
  }

  /** The next due job, locked with SKIP LOCKED. */
  claimDueJob(): Promise<Job | undefined> {
    return this.jobs.claimDue(this.manager);
  }

  lockAttempt(attemptId: string): Promise<Attempt | undefined> {
    return this.attempts.lockById(attemptId, this.manager);
  }

  listAttempts(jobId: string): Promise<Attempt[]> {
    return this.attempts.listForJob(jobId, this.manager);
  }

  async insertAttempt(attempt: NewAttempt, reason: string): Promise<Attempt> {
    const inserted = await this.attempts.insertAttempt(attempt, this.manager);
    this.events.push({ jobId: inserted.jobId, attemptId: inserted.id, subject: 'attempt', from: null, to: 'starting', reason, detail: { provider: inserted.provider, number: inserted.number } });
    this.afterCommit(() => this.metrics.attempts.inc({ provider: inserted.provider, status: 'starting' }));
    return inserted;
  }

  async claimQueued(attempt: Attempt, workerId: string, timeoutMs: number, hardTimeoutMs: number): Promise<Attempt | undefined> {
    return this.attempts.claimQueued(attempt.id, workerId, timeoutMs, hardTimeoutMs, this.manager);
  }

  /** Moves an attempt (checked against DESIGN §5) and records why. Same-status writes record fields only. */
  async moveAttempt(attempt: Attempt, to: AttemptStatus, reason: string, update: AttemptUpdate = {}, detail?: unknown): Promise<Attempt> {
    if (attempt.status !== to) assertAttemptTransition(attempt.status, to);
    const updated = await this.attempts.updateStatus(attempt.id, to, update, this.manager);
    this.events.push({ jobId: attempt.jobId, attemptId: attempt.id, subject: 'attempt', from: attempt.status, to, reason, detail });
    if (attempt.status !== to) this.afterCommit(() => this.metrics.attempts.inc({ provider: attempt.provider, status: to }));
    return updated;
  }

  /** Bookkeeping on the job (never its version). `nextAttemptInMs`: undefined keeps the schedule, null clears it. */
  async moveJob(job: Job, to: JobStatus, reason: string, nextAttemptInMs?: number | null): Promise<void> {
    if (job.status !== to) assertJobTransition(job.status, to);
    if (job.status === to && nextAttemptInMs === undefined) return;
    await this.jobs.updateBookkeeping(job.id, to, nextAttemptInMs, this.manager);
    if (job.status !== to) {
      this.events.push({ jobId: job.id, subject: 'job', from: job.status, to, reason });
      job.status = to;
    }
    this.afterCommit(() => this.watch.notify(job.id));
  }

  /** Records a settled job's transition (the compare-and-swap itself is the settlement repository's). */
  recordSettled(job: Job, to: JobStatus, reason: string, detail?: unknown): void {
    assertJobTransition(job.status, to);
    this.events.push({ jobId: job.id, subject: 'job', from: job.status, to, reason, detail });
    const jobId = job.id;
    job.status = to;
    this.afterCommit(() => {
      this.metrics.jobsSettled.inc({ status: to });
      this.watch.notify(jobId);
    });
  }

  record(event: JobEvent): void {
    this.events.push(event);
  }

  afterCommit(effect: () => void): void {
    this.effects.push(effect);
  }

  runEffects(logger: Logger): void {
    for (const effect of this.effects) {
      try {
        effect();
      } catch (error) {
        logger.error({ msg: 'post-commit effect failed', error: (error as Error).message });
      }
    }
  }
}

@Injectable()
export class LedgerFactory {
  private readonly logger = new Logger('Ledger');

  constructor(
    private readonly dataSource: DataSource,
    private readonly jobs: JobsRepository,
    private readonly attempts: AttemptsRepository,
    private readonly events: JobEventsRepository,
    private readonly metrics: MetricsService,
    private readonly watch: JobWatch,
  ) {}

  async run<T>(work: (ledger: Ledger) => Promise<T>): Promise<T> {
    let ledger!: Ledger;
    const result = await this.dataSource.transaction(async (manager) => {
      ledger = new Ledger(manager, this.jobs, this.attempts, this.metrics, this.watch);
      const value = await work(ledger);
      await this.events.append(ledger.events, manager);
      return value;
    });
    ledger.runEffects(this.logger);
    return result;
  }
}
