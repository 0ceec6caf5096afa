import {
  type BeforeApplicationShutdown,
  Inject,
  Injectable,
  Logger,
  type OnApplicationBootstrap,
} from '@nestjs/common';

import { safeErrorFields } from '../common/log-safe.js';
import { type AppConfig, appConfig } from '../config/app.config.js';
import { DatabaseOutage } from '../database/outage.js';
import { isDatabaseUnavailable } from '../database/pg-errors.js';
import type { Attempt } from '../ledger/attempt.types.js';
import { AttemptsRepository } from '../ledger/attempts.repository.js';
import { JobsRepository } from '../ledger/jobs.repository.js';
import { LedgerFactory } from '../ledger/ledger.js';
import { MetricsService } from '../metrics/metrics.service.js';
import { CatalogService } from '../providers/catalog.service.js';
import { ProviderRegistry } from '../providers/provider-registry.js';
import { AttemptOutcomes } from './attempt-outcomes.js';

const BATCH = 100;

/**
 * An attempt is looked up again once this share of a reconcile period has passed since its last look-up: a pass
 * that starts early (LOOKUP_JITTER, and the timer's own) still finds it due, and two look-ups of it are never
 * closer than that.
 */
const LOOKUP_PERIOD_SHARE = 0.7;

/** A look-ups pass waits a reconcile period, give or take this share of it (Reconciler.onApplicationBootstrap). */
const LOOKUP_JITTER = 0.25;

/** Look-ups claimed per pass: every unknown attempt of a busy provider within one period. */
const LOOKUP_BATCH = 1000;

/** Look-ups in flight at once in a pass (each holds at most one database connection, for its settlement). */
const LOOKUPS_AT_ONCE = 16;

/**
 * Safe on every replica: each step re-reads and locks what it changes. It finds attempts whose worker went
 * silent past their deadline (`starting`: never sent, so `failed` not_sent; `running`: `unknown`), applies the
 * onTimeout policy to unknown attempts on providers that can act on them (failover, or a status lookup), and
 * frees unknown attempts of finished jobs. One failing item never stops a pass.
 */
@Injectable()
export class Reconciler implements OnApplicationBootstrap, BeforeApplicationShutdown {
  private readonly logger = new Logger(Reconciler.name);
  /** Both timers' passes: one line when they lose the database, one when it is back (docs/operations.md#failover). */
  private readonly outage = new DatabaseOutage(this.logger, 'the reconciler');
  private timer?: NodeJS.Timeout;
  private running?: Promise<void>;
  private lookupTimer?: NodeJS.Timeout;
  private lookingUp?: Promise<void>;
  /** A give-up asked for a look-ups pass while one was under way: another follows it. */
  private lookupsAgain = false;
  private stopped = false;

  constructor(
    @Inject(appConfig.KEY) private readonly config: AppConfig,
    private readonly attempts: AttemptsRepository,
    private readonly jobs: JobsRepository,
    private readonly ledgers: LedgerFactory,
    private readonly outcomes: AttemptOutcomes,
    private readonly catalog: CatalogService,
    private readonly registry: ProviderRegistry,
    private readonly metrics: MetricsService,
  ) {}

  onApplicationBootstrap(): void {
    if (this.config.role === 'api') return;
    void this.warnAboutUnknownProviders();
    const failed = (error: Error) => {
      if (!this.outage.failed(error)) this.logger.error({ msg: 'reconcile pass failed', ...safeErrorFields(error) });
    };
    const recovered = () => void this.outage.recovered();
    this.timer = setInterval(() => {
      if (this.running || !this.outage.retryDue()) return;
      this.running = this.housekeeping()
        .then(recovered, failed)
        .finally(() => (this.running = undefined));
    }, this.config.reconcileIntervalMs);
    this.timer.unref();
    // Look-ups on a timer of their own: a slow housekeeping pass (many overdue attempts) never delays them. Each
    // wait is jittered: replicas on fixed intervals keep their phase, so one would claim every look-up for good, and
    // an answer only the calling process can give (the simulated adapter's memory) would never be asked of it.
    const lookupsLater = () => {
      this.lookupTimer = setTimeout(
        () => {
          if (!this.lookingUp && this.outage.retryDue()) {
            this.lookingUp = this.lookups()
              .then(recovered, failed)
              .finally(() => (this.lookingUp = undefined));
          }
          if (!this.stopped) lookupsLater();
        },
        this.config.reconcileIntervalMs * (1 - LOOKUP_JITTER + 2 * LOOKUP_JITTER * Math.random()),
      );
      this.lookupTimer.unref();
    };
    lookupsLater();
    // A request given up in this process is cancelled at its provider at once, not a period later.
    this.outcomes.onGivenUp(() => this.lookupsNow(failed));
  }

  async beforeApplicationShutdown(): Promise<void> {
    clearInterval(this.timer);
    this.stopped = true;
    clearTimeout(this.lookupTimer);
    await Promise.all([this.running, this.lookingUp]);
  }

  /** A look-ups pass now, or right after the one under way (the claim decides what it takes, across replicas). */
  private lookupsNow(failed: (error: Error) => void): void {
    if (this.stopped) return;
    if (this.lookingUp) {
      this.lookupsAgain = true;
      return;
    }
    this.lookingUp = this.lookups()
      .catch(failed)
      .finally(() => {
        this.lookingUp = undefined;
        if (this.lookupsAgain) {
          this.lookupsAgain = false;
          this.lookupsNow(failed);
        }
      });
  }

  /** One whole pass, as both timers make it (the tests call it). */
  async pass(): Promise<void> {
    await this.housekeeping();
    await this.lookups();
  }

  /** Overdue attempts, failover, attempts of finished jobs let go, the gauge. */
  private async housekeeping(): Promise<void> {
    for (const overdue of await this.attempts.findOverdue(BATCH)) {
      await this.each(overdue, async () => {
        const notSent = await this.outcomes.notSent(
          overdue.id,
          overdue.jobId,
          'The worker that claimed the attempt never called the provider.',
        );
        if (!notSent) await this.outcomes.unknown(overdue.id, overdue.jobId, 'deadline_passed_no_worker');
      });
    }
    // failover: given up as soon as a certified fallback exists (one may have been certified since the deadline).
    for (const attempt of await this.attempts.findUnknownOfLiveJobs(this.failoverProviders(), BATCH)) {
      await this.each(attempt, () => this.outcomes.applyTimeoutPolicy(attempt));
    }
    for (const abandoned of await this.attempts.findAbandoned(BATCH)) {
      await this.each(abandoned, () => this.outcomes.abandon(abandoned.id, abandoned.jobId));
    }
    this.metrics.attemptsUnknown.set(await this.attempts.countUnknown());
  }

  /** Look-ups: each attempt at most once per period, across replicas (claimLookups stamps provider_checked_at). */
  private async lookups(): Promise<void> {
    const period = this.config.reconcileIntervalMs * LOOKUP_PERIOD_SHARE;
    // A look-up is a provider round trip and a settlement: LOOKUPS_AT_ONCE of them in flight, so a pass over many
    // unknown attempts ends within its period.
    const claimed = await this.ledgers.claimLookups(this.lookupProviders(), period, LOOKUP_BATCH);
    let next = 0;
    const lane = async () => {
      for (let i = next++; i < claimed.length; i = next++) {
        const { attempt, cancel } = claimed[i];
        await this.each(attempt, () => this.lookup(attempt, cancel));
      }
    };
    await Promise.all(Array.from({ length: Math.min(LOOKUPS_AT_ONCE, claimed.length) }, lane));
  }

  /** Providers whose unknown attempts the reconciler gives up for a certified fallback. */
  private failoverProviders(): string[] {
    return this.catalog
      .listProviders()
      .filter((p) => p.onTimeout === 'failover' && p.sideEffectFree)
      .map((p) => p.name);
  }

  /** Providers whose adapter can look a request up: held attempts on the others wait for an operator. */
  private lookupProviders(): string[] {
    return this.catalog
      .listProviders()
      .filter((p) => this.registry.find(p.name)?.lookup)
      .map((p) => p.name);
  }

  private async each(item: { id: string; jobId: string }, work: () => Promise<unknown>): Promise<void> {
    try {
      await work();
    } catch (error) {
      if (isDatabaseUnavailable(error)) throw error;
      this.logger.error({
        msg: 'reconciling one attempt failed; going on',
        attemptId: item.id,
        jobId: item.jobId,
        ...safeErrorFields(error),
      });
    }
  }

  /**
   * Asks the provider what became of the request: by its id where it gave one (OpenAI's Responses), by the
   * attempt id otherwise (the simulated adapter), and applies the answer (AttemptOutcomes.fromProvider). A request
   * nobody waits for any more (`cancel`) is cancelled there instead, where the adapter can: what the cancel
   * answers is the same kind of answer (a response that had completed competes, one still running is asked again
   * next period). Here, on the look-ups' own timer, and never in housekeeping: a cancel that stalls holds one lane
   * until its deadline, never the overdue and failover work.
   */
  private async lookup(attempt: Attempt, cancel: boolean): Promise<void> {
    const adapter = this.registry.find(attempt.provider);
    if (!adapter?.lookup) return;
    const operation = this.catalog.operation(await this.attempts.operationOfJob(attempt.jobId));
    const ref = {
      attemptId: attempt.id,
      providerRequestId: attempt.providerRequestId,
      maxResponseBytes: operation?.maxResponseBytes,
    };
    const said = (cancel && adapter.cancel ? await adapter.cancel(ref) : undefined) ?? (await adapter.lookup(ref));
    const done = await this.outcomes.fromProvider(attempt, said);
    const msg = cancel ? 'cancelled at the provider' : 'looked up at the provider';
    this.logger.debug({ msg, attemptId: attempt.id, jobId: attempt.jobId, done });
  }

  /** A job that names a provider which left the catalog fails or moves on when claimed; say so at start. */
  private async warnAboutUnknownProviders(): Promise<void> {
    try {
      const stray = await this.jobs.liveJobsNamingOtherProviders(this.catalog.listProviders().map((p) => p.name));
      for (const { provider, jobs } of stray) {
        this.logger.warn({
          msg: 'live jobs name a provider that is not in the catalog: it will be skipped',
          provider,
          jobs,
        });
      }
    } catch (error) {
      if (!isDatabaseUnavailable(error)) {
        this.logger.error({ msg: 'start-up provider check failed', ...safeErrorFields(error) });
      }
    }
  }
}
