import {
  type BeforeApplicationShutdown,
  Inject,
  Injectable,
  Logger,
  type OnApplicationBootstrap,
} from '@nestjs/common';

import { type AppConfig, appConfig } from '../config/app.config.js';
import { BacklogRepository, type DueState } from './backlog.repository.js';
import { MetricsService } from './metrics.service.js';

/** How often the backlog is read: a scale decision needs tens of seconds of history, not every scrape. */
const REFRESH_MS = 10_000;
/** The most due jobs one count reads (ready ones in all, waiting ones per provider); a backlog beyond reads as this. */
export const DUE_COUNT_CAP = 10_000;
const STATES: DueState[] = ['ready', 'waiting_for_capacity'];
/** Owners onejob_owner_jobs shows: the most queued, so its label set stays bounded whatever the number of teams. */
export const OWNER_METRICS_TOP = 20;

/**
 * Keeps onejob_jobs_due and onejob_oldest_due_job_age_seconds current in worker processes (ROLE worker or all):
 * one bounded read every 10 s per process, off the request path, so a scrape never waits on the database.
 */
@Injectable()
export class BacklogSampler implements OnApplicationBootstrap, BeforeApplicationShutdown {
  private readonly logger = new Logger('BacklogSampler');
  private timer?: NodeJS.Timeout;
  private inFlight?: Promise<void>;

  constructor(
    @Inject(appConfig.KEY) private readonly config: AppConfig,
    private readonly backlog: BacklogRepository,
    private readonly metrics: MetricsService,
  ) {}

  onApplicationBootstrap(): void {
    if (this.config.role === 'api') return;
    void this.refresh();
    this.timer = setInterval(() => void this.refresh(), REFRESH_MS);
    this.timer.unref();
  }

  async beforeApplicationShutdown(): Promise<void> {
    clearInterval(this.timer);
    await this.inFlight;
  }

  /** One read; a read still in flight is joined rather than doubled. A failed read keeps the last values. */
  refresh(): Promise<void> {
    this.inFlight ??= this.read().finally(() => (this.inFlight = undefined));
    return this.inFlight;
  }

  private async read(): Promise<void> {
    try {
      const { due, oldestAgeSeconds } = await this.backlog.read(DUE_COUNT_CAP);
      this.metrics.jobsDue.reset();
      for (const { provider, state, jobs } of due) this.metrics.jobsDue.set({ provider, state }, jobs);
      for (const state of STATES) this.metrics.oldestDueJobAge.set({ state }, oldestAgeSeconds[state] ?? 0);
      const owners = await this.backlog.ownerLoads(OWNER_METRICS_TOP);
      this.metrics.ownerJobs.reset();
      for (const { owner, queued, inFlight } of owners) {
        this.metrics.ownerJobs.set({ owner, state: 'queued' }, queued);
        this.metrics.ownerJobs.set({ owner, state: 'in_flight' }, inFlight);
      }
    } catch (error) {
      this.logger.warn(`reading the backlog failed: ${(error as Error).message}`);
    }
  }
}
