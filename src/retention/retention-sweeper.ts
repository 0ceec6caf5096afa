import {
  type BeforeApplicationShutdown,
  Inject,
  Injectable,
  Logger,
  type OnApplicationBootstrap,
} from '@nestjs/common';
import { Counter } from 'prom-client';

import { type AppConfig, appConfig } from '../config/app.config.js';
import { DatabaseOutage } from '../database/outage.js';
import { MetricsService } from '../metrics/metrics.service.js';
import { RetentionRepository } from './retention.repository.js';

/** Jobs one statement purges at most: short transactions, short locks. */
export const PURGE_BATCH = 500;

/**
 * Every RETENTION_INTERVAL_MS on the worker role, purges terminal jobs older than JOB_RETENTION_DAYS in batches
 * of PURGE_BATCH until none is left (0 days: never). Safe on every replica (SKIP LOCKED). After a job is purged
 * its idempotency key is free: the same key creates a new job (the published key policy, README#idempotency).
 */
@Injectable()
export class RetentionSweeper implements OnApplicationBootstrap, BeforeApplicationShutdown {
  private readonly logger = new Logger(RetentionSweeper.name);
  private readonly outage = new DatabaseOutage(this.logger, 'the retention sweep');
  private timer?: NodeJS.Timeout;
  private running?: Promise<unknown>;
  private stopping = false;
  private readonly pendingDeliveriesMetric: Counter;

  constructor(
    @Inject(appConfig.KEY) private readonly config: AppConfig,
    private readonly retention: RetentionRepository,
    metrics: MetricsService,
  ) {
    this.pendingDeliveriesMetric = new Counter({
      name: 'onejob_retention_pending_webhook_deliveries_purged_total',
      help: 'Webhook deliveries still pending (never delivered) when retention purged their job.',
      registers: [metrics.registry],
    });
  }

  onApplicationBootstrap(): void {
    if (this.config.role === 'api' || this.config.jobRetentionDays === 0) return;
    this.timer = setInterval(() => {
      if (this.running || !this.outage.retryDue()) return;
      this.running = this.sweep()
        .then(
          () => this.outage.recovered(),
          (error: Error) => {
            if (!this.outage.failed(error)) this.logger.error({ msg: 'retention sweep failed', error: error.message });
          },
        )
        .finally(() => (this.running = undefined));
    }, this.config.retentionIntervalMs);
    this.timer.unref();
  }

  async beforeApplicationShutdown(): Promise<void> {
    this.stopping = true;
    clearInterval(this.timer);
    await this.running;
  }

  /** Purges batch after batch until a short one; returns the jobs purged. */
  async sweep(days = this.config.jobRetentionDays): Promise<number> {
    let total = 0;
    let pending = 0;
    while (!this.stopping) {
      const purged = await this.retention.purgeBatch(days, PURGE_BATCH);
      total += purged.jobs;
      pending += purged.pendingDeliveries;
      if (purged.jobs < PURGE_BATCH) break;
    }
    this.pendingDeliveriesMetric.inc(pending);
    // A pending delivery purged with its job is an announcement its receiver never gets: said, at warn, with
    // the count. (Keeping such jobs instead would let a disabled endpoint hold data past its retention forever.)
    const line = {
      msg: 'retention: terminal jobs purged',
      count: total,
      olderThanDays: days,
      pendingWebhookDeliveries: pending,
    };
    if (pending) {
      this.logger.warn({ ...line, msg: 'retention: terminal jobs purged with webhook deliveries still pending' });
    } else if (total) this.logger.log(line);
    return total;
  }
}
