import { Inject, Injectable, Logger, Optional } from '@nestjs/common';
import { DataSource, type EntityManager } from 'typeorm';

import { safeErrorFields } from '../common/log-safe.js';
import { inTransaction, type Queryable } from '../database/transactions.js';
import { MetricsService } from '../metrics/metrics.service.js';
import { type Attempt, type AttemptStatus, NOT_SENT } from './attempt.types.js';
import {
  AttemptsRepository,
  type AttemptUpdate,
  type CallStart,
  type ClaimedStart,
  type LookupClaim,
  type NewAttempt,
} from './attempts.repository.js';
import type { Job, JobStatus, JobWithAttempts } from './job.types.js';
import { type JobEvent, JobEventsRepository } from './job-events.repository.js';
import { JobSignals } from './job-signals.js';
import {
  type FairClaim,
  JobsRepository,
  type NewJob,
  type OwnerCharge,
  type QueueRows,
  type WaitingRoom,
} from './jobs.repository.js';
import { type Announcement, OUTBOX, type Outbox } from './outbox.port.js';
import { SettlementRepository } from './settlement.repository.js';
import { assertAttemptTransition, assertJobTransition } from './state-machine.js';

export interface FinalError {
  reason: string;
  message: string;
  lastError?: unknown;
}

interface Repositories {
  jobs: JobsRepository;
  attempts: AttemptsRepository;
  settlements: SettlementRepository;
}

/**
 * One transaction over jobs and attempts, and the only writer of both. Every transition is checked against the
 * state machine (docs/design.md#5-states), written, and appended to job_events in the same transaction; metrics,
 * logs and wake-ups run only after commit. Lock order is always job row, then attempt row.
 */
export class Ledger {
  private readonly events: JobEvent[] = [];
  private readonly announcements: Announcement[] = [];
  private readonly effects: Array<() => void> = [];
  /** Jobs whose events a statement of this ledger wrote itself (a claim's), beside those in `events`. */
  private readonly written = new Set<string>();
  private actor?: JobEvent['actor'];

  constructor(
    private readonly manager: EntityManager,
    private readonly repos: Repositories,
    private readonly metrics: MetricsService,
    private readonly signals: JobSignals,
    private readonly logger: Logger,
  ) {}

  lockJob(jobId: string): Promise<Job | undefined> {
    return this.repos.jobs.lockById(jobId, this.manager);
  }

  /**
   * Several jobs locked in id order before any of them changes (a batch's cancel), then the rows of every batch
   * they belong to, in id order: each change's trigger (migration CreateBatches) then finds them held, and the
   * order is the settlements' own, jobs first, then batches by id.
   */
  async lockJobs(jobIds: string[]): Promise<Job[]> {
    const jobs = await this.repos.jobs.lockManyById(jobIds, this.manager);
    await this.repos.jobs.lockBatchesOf(jobIds, this.manager);
    return jobs;
  }

  /** The owner's job (I7), locked; undefined for another owner's. */
  lockOwnedJob(ownerId: string, jobId: string): Promise<Job | undefined> {
    return this.repos.jobs.lockOwned(ownerId, jobId, this.manager);
  }

  /** The job and one of its attempts, locked job first, in one round trip. */
  lockPair(jobId: string, attemptId: string): Promise<{ job: Job; attempt: Attempt } | undefined> {
    return this.repos.attempts.lockPair(jobId, attemptId, this.manager);
  }

  listAttempts(jobId: string): Promise<Attempt[]> {
    return this.repos.attempts.listForJob(jobId, this.manager);
  }

  /**
   * Up to `limit` due jobs with their attempts, owner by owner in turn (docs/design.md#fair-share), locked (SKIP
   * LOCKED) until this transaction ends; of the jobs waiting for capacity, at most the room each provider has.
   */
  claimDue(limit: number, waiting: WaitingRoom = { providers: [], rooms: [] }, sole = false): Promise<FairClaim> {
    return this.repos.jobs.claimDue(limit, waiting, this.manager, sole);
  }

  /**
   * A claim's jobs, less those over their owner's maxConcurrency: the claim's charges are recorded (when it served
   * more than one owner) and capped owners' rows locked, then their calls in flight are counted under that lock, so
   * two replicas never both fill one owner's last slot.
   */
  async shareOut(claim: FairClaim): Promise<JobWithAttempts[]> {
    const shared = claim.ownersPresent > 1;
    const charges: OwnerCharge[] = claim.shares
      .filter((s) => shared || s.capped)
      .map((s) => ({ owner_id: s.ownerId, start: s.start, inc: shared ? s.jobs / s.weight : 0 }));
    const caps = await this.repos.jobs.chargeOwners(charges, this.manager, claim.held);
    if (!caps.size) return claim.jobs;
    const inFlight = await this.repos.jobs.inFlightByOwner([...caps.keys()], this.manager);
    const left = new Map([...caps].map(([owner, cap]) => [owner, cap - (inFlight.get(owner) ?? 0)]));
    return claim.jobs.filter((job) => {
      const room = left.get(job.ownerId);
      if (room === undefined) return true;
      left.set(job.ownerId, room - 1);
      return room > 0;
    });
  }

  /** At a worker's start: jobs waiting on a provider the catalog no longer names are planned afresh. */
  releaseWaitsOutside(known: string[]): Promise<number> {
    return this.repos.jobs.releaseWaitsOutside(known, this.manager);
  }

  /**
   * This transaction, for what must commit with the ledger's writes but is not the ledger's: a claim's provider
   * locks, leases and state (CapacityGate, src/capacity/). Jobs and attempts are written through the methods here.
   */
  get transaction(): Queryable {
    return this.manager;
  }

  /** Claimed jobs that must wait for capacity on `provider`: no attempt, their place in the queue kept. */
  async waitForCapacity(jobs: Job[], provider: string): Promise<void> {
    if (!jobs.length) return;
    const started = new Set(
      await this.repos.jobs.markWaiting(
        jobs.map((j) => j.id),
        provider,
        this.manager,
      ),
    );
    for (const job of jobs) {
      if (started.has(job.id)) {
        this.events.push({
          jobId: job.id,
          subject: 'job',
          from: job.status,
          to: job.status,
          reason: 'waiting_for_capacity',
          detail: { provider },
        });
      }
    }
  }

  /** A claim's new attempts, their jobs marked running and the events, in one statement. */
  async startClaimed(starts: ClaimedStart[]): Promise<Attempt[]> {
    const inserted = await this.repos.attempts.insertClaimed(starts, this.manager);
    for (const attempt of inserted) this.written.add(attempt.jobId);
    this.afterCommit(() => {
      for (const attempt of inserted) this.metrics.attempts.inc({ provider: attempt.provider, status: 'starting' });
    });
    return inserted;
  }

  async insertAttempt(attempt: NewAttempt, reason: string): Promise<Attempt> {
    const inserted = await this.repos.attempts.insertAttempt(attempt, this.manager);
    this.events.push({
      jobId: inserted.jobId,
      attemptId: inserted.id,
      subject: 'attempt',
      from: null,
      to: 'starting',
      reason,
      detail: { provider: inserted.provider, number: inserted.number },
    });
    this.afterCommit(() => this.metrics.attempts.inc({ provider: inserted.provider, status: 'starting' }));
    return inserted;
  }

  claimQueued(
    attempt: Attempt,
    workerId: string,
    timeoutMs: number,
    hardTimeoutMs: number,
  ): Promise<Attempt | undefined> {
    return this.repos.attempts.claimQueued(attempt.id, workerId, timeoutMs, hardTimeoutMs, this.manager);
  }

  /** Moves an attempt (checked against the state machine) and records why. Same-status writes record fields only. */
  async moveAttempt(
    attempt: Attempt,
    to: AttemptStatus,
    reason: string,
    update: AttemptUpdate = {},
    detail?: unknown,
  ): Promise<Attempt> {
    if (attempt.status !== to) assertAttemptTransition(attempt.status, to);
    // Who ended an unknown attempt (docs/design.md#resolution-at-the-provider): the service's clocks unless told.
    const by = attempt.status === 'unknown' && to !== 'unknown' ? (update.resolvedBy ?? 'deadline') : undefined;
    const updated = await this.repos.attempts.updateStatus(attempt.id, to, { ...update, resolvedBy: by }, this.manager);
    this.events.push({
      jobId: attempt.jobId,
      attemptId: attempt.id,
      subject: 'attempt',
      from: attempt.status,
      to,
      reason,
      detail,
    });
    if (to === 'unknown' && attempt.status !== to) {
      this.announcements.push({ jobId: attempt.jobId, attemptId: attempt.id, type: 'attempt.unknown' });
    }
    if (attempt.status !== to) {
      this.afterCommit(() => this.metrics.attempts.inc({ provider: attempt.provider, status: to }));
    }
    if (by) this.afterCommit(() => this.metrics.unknownResolved.inc({ by }));
    return updated;
  }

  /** The provider's id of the attempt's request, committed as soon as the provider gave it, with its event. */
  async recordProviderRequest(attempt: Attempt, providerRequestId: string): Promise<void> {
    await this.repos.attempts.recordProviderRequest(attempt.id, providerRequestId, this.manager);
    const { jobId, id: attemptId, status } = attempt;
    const detail = { providerRequestId };
    this.events.push({
      jobId,
      attemptId,
      subject: 'attempt',
      from: status,
      to: status,
      reason: 'provider_request_created',
      detail,
    });
  }

  /** What the provider now says of the attempt's request; an event only when that changed. */
  async noteProviderStatus(attempt: Attempt, providerStatus: string, reason: string, detail?: unknown): Promise<void> {
    if (attempt.providerStatus === providerStatus) return;
    await this.repos.attempts.noteProviderStatus(attempt.id, providerStatus, this.manager);
    const { jobId, id: attemptId, status } = attempt;
    const said = { providerStatus, ...(detail as object | undefined) };
    this.events.push({ jobId, attemptId, subject: 'attempt', from: status, to: status, reason, detail: said });
  }

  /** Bookkeeping on the job (never its version). `nextAttemptInMs`: undefined keeps the schedule, null clears it. */
  async moveJob(job: Job, to: JobStatus, reason: string, nextAttemptInMs?: number | null): Promise<void> {
    if (job.status !== to) assertJobTransition(job.status, to);
    if (job.status === to && nextAttemptInMs === undefined) return;
    await this.repos.jobs.updateBookkeeping(job.id, to, nextAttemptInMs, this.manager);
    if (job.status !== to) {
      this.events.push({ jobId: job.id, subject: 'job', from: job.status, to, reason });
      job.status = to;
    }
    if (typeof nextAttemptInMs === 'number') this.afterCommit(() => this.signals.jobsDue());
  }

  /**
   * Nothing to start until `provider`'s pause or cooldown ends (docs/design.md#capacity): the job reads `pending`
   * (no attempt is live, none runs), waits on the provider and is due at the end, or sooner if it opens earlier.
   */
  async deferOn(job: Job, provider: string, reason: string, delayMs: number): Promise<void> {
    if (job.status !== 'pending') assertJobTransition(job.status, 'pending');
    await this.repos.jobs.deferOn(job.id, provider, delayMs, this.manager);
    if (job.status !== 'pending') {
      const detail = { provider, delayMs: Math.round(delayMs) };
      this.events.push({ jobId: job.id, subject: 'job', from: job.status, to: 'pending', reason, detail });
      job.status = 'pending';
    }
  }

  /** A final failure through the same compare-and-swap; false when the job was already settled or cancelled. */
  async settleFailure(job: Job, readVersion: number, error: FinalError): Promise<boolean> {
    const version = await this.repos.settlements.failIfVersion(job.id, readVersion, error, this.manager);
    if (version === undefined) return false;
    this.events.push({
      jobId: job.id,
      subject: 'job',
      from: job.status,
      to: 'failed',
      reason: error.reason,
      detail: { version },
    });
    this.settled(job, 'failed');
    return true;
  }

  /**
   * The owner gives up the intent: the job is cancelled and its version bumped (the fence). An attempt the API
   * queued and no worker took was never sent: it ends `not_sent` instead of waiting forever.
   */
  async cancel(job: Job): Promise<boolean> {
    const version = await this.repos.settlements.cancelIfLive(job.id, this.manager);
    if (version === undefined) return false;
    this.events.push({
      jobId: job.id,
      subject: 'job',
      from: job.status,
      to: 'cancelled',
      reason: 'cancelled_by_owner',
      detail: { version },
    });
    this.settled(job, 'cancelled');
    for (const queued of (await this.listAttempts(job.id)).filter(
      (a) => a.status === 'starting' && a.claimedAt === null,
    )) {
      await this.moveAttempt(queued, 'failed', NOT_SENT, {
        error: {
          reason: NOT_SENT,
          message: 'The job was cancelled before a worker took the attempt.',
          retryable: false,
        },
        finished: true,
      });
    }
    return true;
  }

  /** Every event this ledger writes records the operator's key that caused it (I7: operator actions on the record). */
  actAs(actor: NonNullable<JobEvent['actor']>): void {
    this.actor = actor;
  }

  record(event: JobEvent): void {
    this.events.push(event);
  }

  afterCommit(effect: () => void): void {
    this.effects.push(effect);
  }

  private settled(job: Job, to: JobStatus): void {
    assertJobTransition(job.status, to);
    const jobId = job.id;
    job.status = to;
    // Only a winning settlement gets here: a discarded result announces nothing.
    this.announcements.push({ jobId, type: `job.${to}` as Announcement['type'] });
    this.afterCommit(() => {
      this.metrics.jobsSettled.inc({ status: to });
      this.signals.jobSettled(jobId);
    });
  }

  /** @internal the factory's commit step. */
  pendingEvents(): JobEvent[] {
    const actor = this.actor;
    return actor ? this.events.map((event) => ({ ...event, actor })) : this.events;
  }

  /** @internal after commit: the jobs whose timeline this transaction wrote to. */
  timelinesWritten(): Set<string> {
    const ids = new Set(this.written);
    for (const event of this.events) ids.add(event.jobId);
    return ids;
  }

  /** @internal the factory's commit step. */
  pendingAnnouncements(): Announcement[] {
    return this.announcements;
  }

  /** @internal runs after commit. */
  runEffects(): void {
    for (const effect of this.effects) {
      try {
        effect();
      } catch (error) {
        this.logger.error({ msg: 'post-commit effect failed', ...safeErrorFields(error) });
      }
    }
  }
}

/** Opens ledgers: one transaction each, its events appended before commit and its effects run after. */
@Injectable()
export class LedgerFactory {
  private readonly logger = new Logger('Ledger');
  private readonly repos: Repositories;

  constructor(
    private readonly dataSource: DataSource,
    jobs: JobsRepository,
    attempts: AttemptsRepository,
    settlements: SettlementRepository,
    private readonly events: JobEventsRepository,
    private readonly metrics: MetricsService,
    private readonly signals: JobSignals,
    @Optional() @Inject(OUTBOX) private readonly outbox?: Outbox,
  ) {
    this.repos = { jobs, attempts, settlements };
  }

  /**
   * One transaction: `work`, then its events and announcements; effects after commit. Run again when a pooler refused
   * a named statement (inTransaction), unless `once`: work that changes this process's memory (the claim's spare
   * leases) cleans up and retries itself.
   */
  async run<T>(work: (ledger: Ledger) => Promise<T>, options: { once?: boolean } = {}): Promise<T> {
    let ledger!: Ledger;
    const transaction = options.once
      ? (w: (m: EntityManager) => Promise<T>) => this.dataSource.transaction(w)
      : (w: (m: EntityManager) => Promise<T>) => inTransaction(this.dataSource, w);
    const result = await transaction(async (manager) => {
      ledger = new Ledger(manager, this.repos, this.metrics, this.signals, this.logger);
      const value = await work(ledger);
      await this.events.append(ledger.pendingEvents(), manager);
      const announcements = ledger.pendingAnnouncements();
      if (announcements.length && this.outbox) await this.outbox.enqueue(announcements, manager);
      return value;
    });
    ledger.runEffects();
    this.signals.eventsWritten(ledger.timelinesWritten());
    if (ledger.pendingAnnouncements().length) this.outbox?.announced();
    return result;
  }

  /**
   * A new job and its `created` event, committed before it returns (JobsRepository.insertJob: the creates of a
   * moment share one statement). A taken owner and key is DuplicateIdempotencyKeyError; a budget it would pass,
   * OverBudgetError.
   */
  create(job: NewJob): Promise<Job> {
    return this.repos.jobs.insertJob(job);
  }

  /**
   * The attempts the reconciler looks up (or cancels) at their provider now, claimed for this period across
   * replicas: each gets `provider_checked_at`, so no replica asks again within `periodMs`
   * (AttemptsRepository.claimLookups).
   */
  claimLookups(providers: string[], periodMs: number, limit: number): Promise<LookupClaim[]> {
    return this.repos.attempts.claimLookups(providers, periodMs, limit);
  }

  /**
   * After a claim committed: the owner queue's rows it found empty, recomputed in one autocommit statement
   * (JobsRepository.tidyOwnerQueue, docs/design.md#fair-share). A row left behind only costs a later claim a look.
   */
  tidyOwnerQueue(rows: QueueRows): Promise<number> {
    return this.repos.jobs.tidyOwnerQueue(rows, this.dataSource.manager);
  }

  /**
   * `starting` -> `running` for a batch about to be called, deadlines counted from now, in one autocommit
   * statement (each attempt changes alone, guarded by its status: no job lock needed). Returns the attempts that
   * may be sent; the rest were given up meanwhile or their hard deadline passed. `again`: the worker's id when it
   * asks again after losing the answer (AttemptRunner.begin).
   */
  async markRunning(calls: CallStart[], again?: string): Promise<Attempt[]> {
    const running = await this.repos.attempts.markRunning(calls, this.dataSource.manager, again);
    for (const attempt of running) this.metrics.attempts.inc({ provider: attempt.provider, status: 'running' });
    this.signals.eventsWritten(running.map((attempt) => attempt.jobId));
    return running;
  }
}
