import { type BeforeApplicationShutdown, Inject, Injectable, Logger, type OnApplicationBootstrap } from '@nestjs/common';

import { safeErrorFields } from '../common/log-safe.js';
import { type AppConfig, appConfig } from '../config/app.config.js';
import { isDatabaseUnavailable } from '../database/pg-errors.js';
import type { Attempt } from '../ledger/attempt.types.js';
import { AttemptsRepository } from '../ledger/attempts.repository.js';
import { JobsRepository } from '../ledger/jobs.repository.js';
import { MetricsService } from '../metrics/metrics.service.js';
import { CatalogService } from '../providers/catalog.service.js';
import { checkOutput } from '../providers/output-contract.js';
import { ProviderRegistry } from '../providers/provider-registry.js';
import { AttemptOutcomes } from './attempt-outcomes.js';

const BATCH = 100;

/**
 * Safe on every replica: each step re-reads and locks what it changes. It finds attempts whose worker went
 * silent past their deadline (`starting`: never sent, so `failed` not_sent; `running`: `unknown`), applies the
 * onTimeout policy to unknown attempts on providers that can act on them (failover, or a status lookup), and
 * frees unknown attempts of finished jobs. One failing item never stops a pass.
 */
@Injectable()
export class Reconciler implements OnApplicationBootstrap, BeforeApplicationShutdown {
  private readonly logger = new Logger(Reconciler.name);
  private timer?: NodeJS.Timeout;
  private running?: Promise<void>;

  constructor(
    @Inject(appConfig.KEY) private readonly config: AppConfig,
    private readonly attempts: AttemptsRepository,
    private readonly jobs: JobsRepository,
    private readonly outcomes: AttemptOutcomes,
    private readonly catalog: CatalogService,
    private readonly registry: ProviderRegistry,
    private readonly metrics: MetricsService,
  ) {}

  onApplicationBootstrap(): void {
    if (this.config.role === 'api') return;
    void this.warnAboutUnknownProviders();
    this.timer = setInterval(() => {
      if (this.running) return;
      this.running = this.pass()
        .catch((error: Error) => {
          if (!isDatabaseUnavailable(error)) this.logger.error({ msg: 'reconcile pass failed', ...safeErrorFields(error) });
        })
        .finally(() => (this.running = undefined));
    }, this.config.reconcileIntervalMs);
    this.timer.unref();
  }

  async beforeApplicationShutdown(): Promise<void> {
    clearInterval(this.timer);
    await this.running;
  }

  async pass(): Promise<void> {
    for (const overdue of await this.attempts.findOverdue(BATCH)) {
      await this.each(overdue, async () => {
        const notSent = await this.outcomes.notSent(overdue.id, overdue.jobId, 'The worker that claimed the attempt never called the provider.');
        if (!notSent) await this.outcomes.unknown(overdue.id, overdue.jobId, 'deadline_passed_no_worker');
      });
    }
    for (const attempt of await this.attempts.findUnknownOfLiveJobs(this.actionableProviders(), BATCH)) {
      await this.each(attempt, async () => {
        if ((await this.outcomes.applyTimeoutPolicy(attempt)) === 'hold') await this.lookup(attempt);
      });
    }
    for (const abandoned of await this.attempts.findAbandoned(BATCH)) {
      await this.each(abandoned, () => this.outcomes.abandon(abandoned.id, abandoned.jobId));
    }
    this.metrics.attemptsUnknown.set(await this.attempts.countUnknown());
  }

  /** Providers whose unknown attempts the reconciler can move: failover policy, or an adapter with a lookup. */
  private actionableProviders(): string[] {
    return this.catalog
      .listProviders()
      .filter((p) => (p.onTimeout === 'failover' && p.sideEffectFree) || this.registry.find(p.name)?.lookup)
      .map((p) => p.name);
  }

  private async each(item: { id: string; jobId: string }, work: () => Promise<unknown>): Promise<void> {
    try {
      await work();
    } catch (error) {
      if (isDatabaseUnavailable(error)) throw error;
      this.logger.error({ msg: 'reconciling one attempt failed; going on', attemptId: item.id, jobId: item.jobId, ...safeErrorFields(error) });
    }
  }

  /** hold: ask the provider what became of the request (by the idempotency key it was sent with), where it can. */
  private async lookup(attempt: Attempt): Promise<void> {
    const adapter = this.registry.find(attempt.provider);
    if (!adapter?.lookup) return;
    const found = await adapter.lookup(attempt.id);
    if (found.state === 'succeeded') {
      const operation = await this.attempts.operationOfJob(attempt.jobId);
      const check = checkOutput(this.catalog, operation, found.response.text);
      if (check.ok) await this.outcomes.succeeded(attempt.id, attempt.jobId, { value: check.value, usage: found.response.usage, providerRequestId: found.response.requestId });
      else await this.outcomes.failed(attempt.id, attempt.jobId, { reason: 'contract_violation', message: 'the output breaks the operation contract', retryable: false, details: check.errors });
    } else if (found.state === 'failed') {
      await this.outcomes.failed(attempt.id, attempt.jobId, { reason: found.error.reason, message: found.error.message, retryable: found.error.retryable, status: found.error.status });
    }
  }

  /** A job that names a provider which left the catalog fails or moves on when claimed; say so at start. */
  private async warnAboutUnknownProviders(): Promise<void> {
    try {
      const stray = await this.jobs.liveJobsNamingOtherProviders(this.catalog.listProviders().map((p) => p.name));
      for (const { provider, jobs } of stray) {
        this.logger.warn({ msg: 'live jobs name a provider that is not in the catalog: it will be skipped', provider, jobs });
      }
    } catch (error) {
      if (!isDatabaseUnavailable(error)) this.logger.error({ msg: 'start-up provider check failed', ...safeErrorFields(error) });
    }
  }
}
