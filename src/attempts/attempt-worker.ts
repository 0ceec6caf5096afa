import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';

import {
  type BeforeApplicationShutdown,
  Inject,
  Injectable,
  Logger,
  type OnApplicationBootstrap,
} from '@nestjs/common';

import { type Candidate as CapacityCandidate, CapacityGate } from '../capacity/capacity-gate.js';
import { ProviderCapacity } from '../capacity/provider-capacity.js';
import { shutdownController } from '../common/deadline.js';
import { safeErrorFields } from '../common/log-safe.js';
import { Wakeup } from '../common/wakeup.js';
import { type AppConfig, appConfig } from '../config/app.config.js';
import type { ProviderSpec } from '../config/catalog.types.js';
import { DatabaseOutage } from '../database/outage.js';
import { isDatabaseUnavailable, isRefusedNamedStatement } from '../database/pg-errors.js';
import { type Attempt, NOT_SENT } from '../ledger/attempt.types.js';
import type { ClaimedStart } from '../ledger/attempts.repository.js';
import type { JobWithAttempts } from '../ledger/job.types.js';
import { JobSignals } from '../ledger/job-signals.js';
import type { QueueRows } from '../ledger/jobs.repository.js';
import { type Ledger, LedgerFactory } from '../ledger/ledger.js';
import { CatalogService } from '../providers/catalog.service.js';
import { renderPrompt } from '../providers/prompt.js';
import { ProviderRegistry } from '../providers/provider-registry.js';
import { isPurgedJobError } from '../retention/purged-job.js';
import { inJobTrace } from '../telemetry/tracing.js';
import { AttemptRunner, type Claimed } from './attempt-runner.js';
import { AttemptScheduler } from './attempt-scheduler.js';

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
  /** A failover or an outage: one line when the claims lose the database, one when they have it back. */
  private readonly outage = new DatabaseOutage(this.logger, 'the claim loop');
  /** Every attempt this process runs, to its recorded outcome: shutdown waits for these. */
  private readonly inFlight = new Set<Promise<void>>();
  /**
   * Of those, the ones whose provider call has not ended: the window WORKER_CONCURRENCY bounds. A call's slot frees
   * when the call returns, so the next claim overlaps the recording of its outcome (a batch of settlements).
   */
  private calls = 0;
  private readonly shutdown = shutdownController();
  private stopping = false;
  private loop?: Promise<void>;
  private readonly wakeup = new Wakeup();
  private unsubscribe?: () => void;
  /** The last claim stopped at an owner's share, not at the room: more is due (FairClaim.more). */
  private moreDue = false;
  /** The last claim saw at most one owner, uncapped: the next starts with the sole-owner claim (CLAIM_SOLE). */
  private soleOwner = false;
  /** The owner queue's rows the last committed claim found empty; the tidy of them in flight (one at a time). */
  private toTidy?: QueueRows;
  private tidying?: Promise<void>;
  /** When the emptiest rate bucket that held back a job last has room again (epoch ms); Infinity when none did. */
  private refilledAt = Infinity;

  constructor(
    @Inject(appConfig.KEY) private readonly config: AppConfig,
    private readonly ledgers: LedgerFactory,
    private readonly scheduler: AttemptScheduler,
    private readonly catalog: CatalogService,
    private readonly runner: AttemptRunner,
    private readonly signals: JobSignals,
    private readonly capacity: ProviderCapacity,
    private readonly gate: CapacityGate,
    private readonly registry: ProviderRegistry,
  ) {}

  onApplicationBootstrap(): void {
    if (this.config.role === 'api') return;
    this.unsubscribe = this.signals.onDue((waitingFor) => {
      // A job born waiting on a provider with no room now is no reason to claim: the room's return wakes us.
      if (waitingFor.some((name) => name === '' || this.hasRoom(name))) this.poke();
    });
    this.loop = this.releaseStaleWaits().then(() => this.claimLoop());
  }

  /** Jobs left waiting on a provider this catalog does not name would never be claimed: plan them afresh. */
  private async releaseStaleWaits(): Promise<void> {
    const known = this.catalog.listProviders().map((p) => p.name);
    try {
      const released = await this.ledgers.run((ledger) => ledger.releaseWaitsOutside(known));
      if (released) {
        this.logger.warn({
          msg: 'jobs waited for capacity on providers no longer in the catalog; planned afresh',
          count: released,
        });
      }
    } catch (error) {
      if (!isDatabaseUnavailable(error)) {
        this.logger.error({ msg: 'releasing stale capacity waits failed', ...safeErrorFields(error) });
      }
    }
  }

  /** SIGTERM: stop claiming, give in-flight attempts SHUTDOWN_GRACE_MS, then abort them (they become `unknown`). */
  async beforeApplicationShutdown(): Promise<void> {
    this.stopping = true;
    this.unsubscribe?.();
    this.poke();
    await this.loop;
    if (this.inFlight.size) {
      let timer: NodeJS.Timeout | undefined;
      const grace = new Promise<'timeout'>(
        (resolve) => (timer = setTimeout(() => resolve('timeout'), this.config.shutdownGraceMs)),
      );
      const ended = await Promise.race([Promise.all(this.inFlight).then(() => 'done' as const), grace]);
      // A drain that ended early must not leave the grace's timer holding the process (a test runner's worker too).
      clearTimeout(timer);
      if (ended === 'timeout') {
        this.logger.warn({ msg: 'shutdown grace over: aborting in-flight attempts', count: this.inFlight.size });
        this.shutdown.abort();
        await Promise.allSettled(this.inFlight);
      }
    }
    await this.capacity.releaseSpares(); // no claim will take them any more
    await this.tidying;
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
      const room = this.config.workerConcurrency - this.calls;
      if (room <= 0 || (room < worthClaiming && this.calls > 0)) {
        await this.idle(this.config.workerPollMs);
        continue;
      }
      let claimed: Claimed[];
      const claimStartedAt = Date.now();
      try {
        claimed = await this.claimBatch(Math.min(room, CLAIM_BATCH));
      } catch (error) {
        if (this.outage.failed(error)) {
          await this.idle(this.outage.backoffMs());
        } else {
          this.logger.error({ msg: 'claim failed', ...safeErrorFields(error) });
          await this.idle(this.config.workerPollMs * 5);
        }
        continue;
      }
      this.outage.recovered();
      if (claimed.length) this.launch(claimed, claimStartedAt);
      // A short batch means nothing more is due now: sleep until woken. A full one: claim again at once.
      // (or, when a rate bucket held jobs back, until it has refilled: a bucket holds only a second's worth).
      // An owner's share ended the claim while others' work is due: claim again (unless it took nothing at all).
      const more = this.moreDue && claimed.length > 0;
      if (claimed.length < Math.min(room, CLAIM_BATCH) && !more) {
        await this.idle(Math.min(this.config.workerPollMs, Math.max(0, this.refilledAt - Date.now())));
      }
    }
  }

  private launch(claimed: Claimed[], claimStartedAt: number): void {
    const ready = this.runner.begin(claimed, this.shutdown.signal);
    for (const { job, attempt } of claimed) {
      this.calls++;
      let calling = true;
      const callEnded = () => {
        if (!calling) return;
        calling = false;
        this.calls--;
        this.poke();
      };
      const run = ready
        .then((batch) => {
          const one = batch.get(attempt.id);
          const info = { jobId: job.id, attemptId: attempt.id, provider: attempt.provider, claimStartedAt };
          return one && inJobTrace(job, info, () => this.runner.call(one, this.shutdown.signal, callEnded));
        })
        .catch((error: Error) =>
          // A job purged by retention while its call was out, or an attempt whose claim was lost with an
          // asynchronous primary (docs/operations.md#failover): nothing is left to reconcile, so not an error.
          isPurgedJobError(error)
            ? this.logger.warn({
                msg: 'late result dropped: its attempt is gone (purged by retention, or lost with the primary)',
                jobId: job.id,
                attemptId: attempt.id,
              })
            : this.logger.error({
                msg: 'attempt run failed; the reconciler will find it',
                jobId: job.id,
                attemptId: attempt.id,
                ...safeErrorFields(error),
              }),
        )
        .finally(() => {
          callEnded();
          this.inFlight.delete(run);
          this.poke();
        });
      this.inFlight.add(run);
    }
  }

  private hasRoom(provider: string): boolean {
    const spec = this.catalog.provider(provider);
    return !spec || this.capacity.roomOf(spec, 1) > 0;
  }

  private poke(): void {
    this.wakeup.poke();
  }

  private idle(ms: number): Promise<void> {
    return this.wakeup.idle(ms);
  }

  /**
   * One claim transaction: lock up to `limit` due jobs (skipping those waiting on a provider without capacity),
   * plan each, admit the calls each provider has capacity for (CapacityGate, docs/design.md#capacity), and insert
   * every new attempt (and mark the jobs running, with events) in one statement, with the leases of capped
   * providers. A job whose plan fails is skipped and logged, never retried first forever: a poison job must not
   * block the others.
   */
  async claimBatch(limit: number, again = false): Promise<Claimed[]> {
    // The providers' states are read on another pooled connection while the claim's transaction begins: one
    // round trip fewer before the jobs are locked. Awaited inside it; a claim that fails first leaves it handled.
    const refreshed = this.capacity.refresh();
    refreshed.catch(() => undefined);
    try {
      this.toTidy = undefined;
      const claimed = await this.claimInTransaction(limit, refreshed);
      this.tidy();
      return claimed;
    } catch (error) {
      // A pooler refused a named statement: nothing ran, naming is off now, and the claim runs again unnamed.
      if (!again && isRefusedNamedStatement(error)) return this.claimBatch(limit, true);
      throw error;
    } finally {
      // Spare leases this claim did not hand over, or handed over in a transaction that rolled back, go back.
      await this.capacity.releaseSpares();
    }
  }

  private claimInTransaction(limit: number, refreshed: Promise<void>): Promise<Claimed[]> {
    // once: claimBatch runs a claim refused for a named statement again itself, after its spares are settled.
    return this.ledgers.run(
      async (ledger) => {
        await refreshed;
        const rooms = this.capacity.rooms(this.catalog.listProviders(), limit);
        const claim = await ledger.claimDue(limit, rooms, this.soleOwner);
        this.moreDue = claim.more;
        this.soleOwner = claim.ownersPresent <= 1 && !claim.shares.some((s) => s.capped);
        this.toTidy = claim.tidy;
        const jobs = await ledger.shareOut(claim);
        const candidates: Candidate[] = [];
        for (const job of jobs) {
          try {
            const candidate = await this.claimOne(ledger, job);
            if (candidate) candidates.push(candidate);
          } catch (error) {
            this.logger.error({ msg: 'claim of one job failed; skipped', jobId: job.id, ...safeErrorFields(error) });
          }
        }
        const admission = await this.gate.admit(ledger, candidates);
        // A bucket's refill still ahead stays the loop's wake-up; one passed already would wake it at every turn.
        this.refilledAt = Math.min(admission.refillAt, this.refilledAt > Date.now() ? this.refilledAt : Infinity);
        const claimed: Claimed[] = [];
        const starts: ClaimedStart[] = [];
        for (const c of admission.admitted) {
          if (c.queued) {
            const attempt = await ledger.claimQueued(c.queued, this.workerId, c.spec.timeoutMs, c.spec.hardTimeoutMs);
            if (attempt) {
              await ledger.moveJob(c.job, 'running', 'attempt_started', null);
              claimed.push({ job: c.job, attempt });
            }
          } else {
            starts.push({
              jobId: c.job.id,
              provider: c.spec.name,
              jobVersion: c.job.version,
              timeoutMs: c.spec.timeoutMs,
              hardTimeoutMs: c.spec.hardTimeoutMs,
              workerId: this.workerId,
              jobFrom: c.job.status,
            });
          }
        }
        const byJob = new Map(jobs.map((j) => [j.id, j]));
        for (const attempt of await ledger.startClaimed(starts)) {
          claimed.push({ job: byJob.get(attempt.jobId)!, attempt });
        }
        await admission.lease(claimed);
        for (const { job } of claimed) job.status = 'running';
        return claimed;
      },
      { once: true },
    );
  }

  /**
   * The owner queue's rows the claim just committed found empty, recomputed beside the calls it starts
   * (LedgerFactory.tidyOwnerQueue). One at a time: rows skipped now are found empty again by a later claim.
   */
  private tidy(): void {
    const rows = this.toTidy;
    if (!rows?.owners.length || this.tidying) return;
    this.tidying = this.ledgers
      .tidyOwnerQueue(rows)
      .then(() => undefined)
      .catch((error: unknown) => {
        this.logger.warn({ msg: 'owner queue tidy failed; a later claim tidies again', ...safeErrorFields(error) });
      })
      .finally(() => (this.tidying = undefined));
  }

  /** Plans one locked job: a queued attempt to take over, or a new attempt to start, if capacity allows. */
  private async claimOne(ledger: Ledger, job: JobWithAttempts): Promise<Candidate | undefined> {
    const queued = job.attempts.find((a) => a.status === 'starting' && a.claimedAt === null);
    if (queued) {
      const spec = this.catalog.provider(queued.provider);
      if (!spec) {
        // The provider left the catalog while the attempt waited: it was never sent.
        await ledger.moveAttempt(queued, 'failed', NOT_SENT, {
          error: {
            reason: 'provider_unavailable',
            message: `Provider ${queued.provider} is not in the catalog.`,
            retryable: false,
          },
          finished: true,
        });
        await this.scheduler.scheduleAfter(ledger, job, job.version, 'provider_unavailable');
        return undefined;
      }
      const gate = this.capacity.gate(spec.name);
      if (gate.kind !== 'open') {
        // Queued by the API just before a pause began (it refuses one during a pause), or while the breaker is open:
        // it waits for the gate's end (or its earlier opening), instead of being sent, or claimed and refused, now.
        const plan = { kind: 'defer', provider: spec.name, delayMs: gate.delayMs, reason: gate.kind } as const;
        await this.scheduler.defer(ledger, job, plan);
        return undefined;
      }
      return { job, spec, queued, cost: this.tokenCost(job, spec) };
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
    if (plan.kind === 'defer') {
      await this.scheduler.defer(ledger, job, plan);
      return undefined;
    }
    const spec = this.catalog.provider(plan.provider)!;
    return { job, spec, cost: this.tokenCost(job, spec) };
  }

  /**
   * Tokens a call will count against tokensPerMinute: the rendered prompt by the provider's counter, plus maxTokens.
   */
  private tokenCost(job: JobWithAttempts, spec: ProviderSpec): number {
    if (spec.tokensPerMinute === undefined) return 0;
    const operation = this.catalog.operation(job.operation)!;
    try {
      return (
        this.registry.adapter(spec.name).countPromptTokens(renderPrompt(operation, job.input)) + operation.maxTokens
      );
    } catch {
      return operation.maxTokens; // rendering fails again in the runner, which fails the attempt before any call
    }
  }
}

/** A planned call, before capacity is granted (CapacityGate.admit). */
interface Candidate extends CapacityCandidate {
  job: JobWithAttempts;
  /** An attempt the API queued (owner-requested), to take over instead of inserting one. */
  queued?: Attempt;
}
