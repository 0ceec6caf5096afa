import { Inject, Injectable, Logger, type BeforeApplicationShutdown, type OnApplicationBootstrap } from '@nestjs/common';
import { appConfig, type AppConfig } from '../config/app.config.js';
import { isDatabaseUnavailable } from '../database/pg-errors.js';
import { MetricsService } from '../metrics/metrics.service.js';
import { CatalogService } from '../providers/catalog.service.js';
import { checkOutput } from '../providers/output-contract.js';
import { ProviderRegistry } from '../providers/provider-registry.js';
import type { Attempt } from './attempt.types.js';
import { AttemptOutcomes } from './attempt-outcomes.js';
import { AttemptsRepository } from './attempts.repository.js';

const BATCH = 100;

/**
 * Safe on every replica: each step re-reads and locks what it changes. It finds attempts whose worker went
 * silent past their deadline (-> unknown), applies each provider's onTimeout policy to unknown attempts (failover,
 * or a status lookup where the adapter has one), and frees unknown attempts of finished jobs.
 */
@Injectable()
export class Reconciler implements OnApplicationBootstrap, BeforeApplicationShutdown {
  private readonly logger = new Logger(Reconciler.name);
  private timer?: NodeJS.Timeout;
  private running?: Promise<void>;

  constructor(
    @Inject(appConfig.KEY) private readonly config: AppConfig,
    private readonly attempts: AttemptsRepository,
    private readonly outcomes: AttemptOutcomes,
    private readonly catalog: CatalogService,
    private readonly registry: ProviderRegistry,
    private readonly metrics: MetricsService,
  ) {}

  onApplicationBootstrap(): void {
    if (this.config.role === 'api') return;
    this.timer = setInterval(() => {
      if (this.running) return;
      this.running = this.pass()
        .catch((error: Error) => {
          if (!isDatabaseUnavailable(error)) this.logger.error({ msg: 'reconcile pass failed', error: error.message });
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
      await this.outcomes.unknown(overdue.id, overdue.jobId, 'deadline_passed_no_worker');
    }
    for (const attempt of await this.attempts.findUnknownOfLiveJobs(BATCH)) {
      if ((await this.outcomes.applyTimeoutPolicy(attempt)) === 'hold') await this.lookup(attempt);
    }
    for (const abandoned of await this.attempts.findAbandoned(BATCH)) {
      await this.outcomes.abandon(abandoned.id, abandoned.jobId);
    }
    this.metrics.attemptsUnknown.set(await this.attempts.countUnknown());
  }

  /** hold: ask the provider what became of the request, where its adapter can. */
  private async lookup(attempt: Attempt): Promise<void> {
    const adapter = this.registry.adapter(attempt.provider);
    if (!adapter.lookup) return;
    const found = await adapter.lookup(attempt.providerRequestId ?? attempt.id);
    if (found.state === 'succeeded') {
      const operation = await this.attempts.operationOfJob(attempt.jobId);
      const check = checkOutput(this.catalog, operation, found.response.text);
      if (check.ok) await this.outcomes.succeeded(attempt.id, attempt.jobId, { value: check.value, usage: found.response.usage, providerRequestId: found.response.requestId });
      else await this.outcomes.failed(attempt.id, attempt.jobId, { reason: 'contract_violation', message: 'the output breaks the operation contract', retryable: false, details: check.errors });
    } else if (found.state === 'failed') {
      await this.outcomes.failed(attempt.id, attempt.jobId, { reason: found.error.reason, message: found.error.message, retryable: found.error.retryable, status: found.error.status });
    }
  }
}
