import {
  type BeforeApplicationShutdown,
  Inject,
  Injectable,
  Logger,
  type OnApplicationBootstrap,
  Optional,
} from '@nestjs/common';
import { DataSource } from 'typeorm';

import { safeErrorFields } from '../common/log-safe.js';
import { type AppConfig, appConfig } from '../config/app.config.js';
import { DatabaseOutage } from '../database/outage.js';
import { rowsOf } from '../database/transactions.js';
import { MetricsService } from '../metrics/metrics.service.js';
import { CatalogService } from './catalog.service.js';
import { CertificationRepository } from './certification.repository.js';
import { CertificationService, contractDigest } from './certification.service.js';
import { TRY_LOCK_RECERTIFY, UNLOCK_RECERTIFY } from './certification.sql.js';
import type { CertificationReport } from './certification.types.js';

/** Any fixed 64-bit number: one replica at a time runs the scheduled certifications. */
const RECERTIFY_LOCK_KEY = 7_355_608_202;

/** Told when a scheduled run ended a certification (webhooks implement it: `provider.decertified`). */
export interface DecertifiedListener {
  decertified(report: CertificationReport): Promise<void>;
}
export const DECERTIFIED_LISTENER = Symbol('DECERTIFIED_LISTENER');

/** A (provider, operation) pair under a schedule, and when its next run is due. */
export interface ScheduledRun {
  provider: string;
  operation: string;
  everyMs: number;
  lastRunAt: Date | null;
  nextRunAt: Date;
}

/**
 * Certifications that stay true (docs/design.md#certifications-that-stay-true): a provider with `recertify:
 * {everyHours}` has its golden cases re-run for every operation it holds a report for, on schedule, by one replica
 * at a time (a session advisory lock on one pinned connection). The run is an ordinary certification: its report
 * is stored whether it passed or not, and the newest report for a digest is the one failover asks (I6), so a
 * failing run ends the certification as it commits. It is counted, priced, and announced.
 */
@Injectable()
export class Recertifier implements OnApplicationBootstrap, BeforeApplicationShutdown {
  private readonly logger = new Logger(Recertifier.name);
  /** Its leadership is an advisory lock held for one pass: a pass after an outage takes it again on the new primary. */
  private readonly outage = new DatabaseOutage(this.logger, 'the recertifier');
  private timer?: NodeJS.Timeout;
  private running?: Promise<void>;

  constructor(
    @Inject(appConfig.KEY) private readonly config: AppConfig,
    private readonly dataSource: DataSource,
    private readonly catalog: CatalogService,
    private readonly certifications: CertificationRepository,
    private readonly certification: CertificationService,
    private readonly metrics: MetricsService,
    @Optional() @Inject(DECERTIFIED_LISTENER) private readonly listener?: DecertifiedListener,
  ) {}

  onApplicationBootstrap(): void {
    if (this.config.role === 'api' || !this.catalog.listProviders().some((p) => p.recertify)) return;
    this.timer = setInterval(
      () => {
        if (this.running || !this.outage.retryDue()) return;
        this.running = this.tick()
          .then(() => void this.outage.recovered())
          .catch((error: Error) => {
            if (!this.outage.failed(error)) {
              this.logger.error({ msg: 'recertification pass failed', ...safeErrorFields(error) });
            }
          })
          .finally(() => (this.running = undefined));
      },
      Math.min(this.config.reconcileIntervalMs, 60_000),
    );
    this.timer.unref();
  }

  async beforeApplicationShutdown(): Promise<void> {
    clearInterval(this.timer);
    await this.running;
  }

  /**
   * Every scheduled pair: the newest report for the catalog's current digest, and when the next run is due (at
   * once for a pair that has a report for an older digest only: the contract changed under it).
   */
  async schedule(): Promise<ScheduledRun[]> {
    const reports = await this.certifications.findLatestPerPair();
    const runs: ScheduledRun[] = [];
    for (const provider of this.catalog.listProviders()) {
      if (!provider.recertify) continue;
      const everyMs = provider.recertify.everyHours * 3_600_000;
      for (const report of reports.filter((r) => r.provider === provider.name)) {
        const operation = this.catalog.operation(report.operation);
        if (!operation) continue;
        const current = report.contractDigest === contractDigest(operation, provider);
        const lastRunAt = new Date(report.createdAt);
        const nextRunAt = current ? new Date(lastRunAt.getTime() + everyMs) : new Date();
        runs.push({ provider: provider.name, operation: operation.name, everyMs, lastRunAt, nextRunAt });
      }
    }
    return runs;
  }

  /** One pass: the due runs, under the lock; a replica that does not get the lock leaves them to the holder. */
  async tick(): Promise<number> {
    if (!(await this.schedule()).some((run) => run.nextRunAt.getTime() <= Date.now())) return 0;
    const runner = this.dataSource.createQueryRunner();
    await runner.connect();
    try {
      const [{ locked }] = await rowsOf(runner, TRY_LOCK_RECERTIFY, [RECERTIFY_LOCK_KEY]);
      if (!locked) return 0;
      try {
        // Read again under the lock: the replica that held it may have just run them.
        const due = (await this.schedule()).filter((run) => run.nextRunAt.getTime() <= Date.now());
        for (const run of due) await this.run(run);
        return due.length;
      } finally {
        await rowsOf(runner, UNLOCK_RECERTIFY, [RECERTIFY_LOCK_KEY]);
      }
    } finally {
      await runner.release();
    }
  }

  private async run(run: ScheduledRun): Promise<void> {
    const wasCertified = await this.certification.isCertified(run.provider, run.operation);
    const report = await this.certification.certify(run.provider, run.operation, 'schedule');
    const labels = { provider: run.provider, operation: run.operation };
    if (report.passed || !wasCertified) return;
    this.metrics.decertified.inc(labels);
    this.logger.warn({
      msg: 'a scheduled certification failed: the provider is no longer certified',
      ...labels,
      reportId: report.id,
    });
    await this.listener
      ?.decertified(report)
      .catch((error: Error) =>
        this.logger.error({ msg: 'announcing a decertification failed', ...labels, ...safeErrorFields(error) }),
      );
  }
}
