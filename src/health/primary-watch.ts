import {
  type BeforeApplicationShutdown,
  Inject,
  Injectable,
  Logger,
  type OnApplicationBootstrap,
} from '@nestjs/common';
import { Counter, Gauge } from 'prom-client';

import { deadline } from '../common/deadline.js';
import { type AppConfig, appConfig } from '../config/app.config.js';
import { MetricsService } from '../metrics/metrics.service.js';
import { DatabaseProbeRepository } from './database-probe.repository.js';

/** How often each process asks whether its database takes writes, and how long one question may take. */
export const PRIMARY_WATCH_MS = 1000;
const PROBE_TIMEOUT_MS = 1000;

export type PrimaryState = 'up' | 'unreachable' | 'read_only';

/**
 * Whether this process has a primary that takes writes (docs/operations.md#failover), for readiness (`degraded`
 * while it has none), the metrics (onejob_database_primary_up, onejob_database_failovers_total,
 * onejob_database_without_primary_seconds_total) and the log: one line when the primary is lost, one when one is
 * back, saying how long it took and whether it is another server. Every pooled connection that meets a demoted or
 * lost server is closed by itself (OnejobClient, src/database/data-source.options.ts); this only watches.
 */
@Injectable()
export class PrimaryWatch implements OnApplicationBootstrap, BeforeApplicationShutdown {
  private readonly logger = new Logger('Database');
  private timer?: NodeJS.Timeout;
  private probing?: Promise<PrimaryState>;
  private state: PrimaryState = 'up';
  /** The server that last took writes: address, port and start time. */
  private server?: string;
  private downSince?: number;
  private lastTick = Date.now();
  private readonly up: Gauge;
  private readonly failovers: Counter;
  private readonly withoutPrimary: Counter;

  constructor(
    @Inject(appConfig.KEY) private readonly config: AppConfig,
    private readonly probe: DatabaseProbeRepository,
    metrics: MetricsService,
  ) {
    this.up = new Gauge({
      name: 'onejob_database_primary_up',
      help: 'Whether the database took writes at the last check (every second): 0 while no primary answers.',
      registers: [metrics.registry],
    });
    this.failovers = new Counter({
      name: 'onejob_database_failovers_total',
      help: 'Times writes moved to another primary (another server, or the same one restarted) since start.',
      registers: [metrics.registry],
    });
    this.withoutPrimary = new Counter({
      name: 'onejob_database_without_primary_seconds_total',
      help: 'Seconds this process had no primary that took writes (unreachable, or read-only).',
      registers: [metrics.registry],
    });
    this.up.set(1);
  }

  async onApplicationBootstrap(): Promise<void> {
    await this.checkReplication();
    this.timer = setInterval(() => void this.check(), PRIMARY_WATCH_MS);
    this.timer.unref();
  }

  async beforeApplicationShutdown(): Promise<void> {
    clearInterval(this.timer);
    await this.probing;
  }

  /** The state now, asked of the database (at most one question at a time; readiness shares the watch's). */
  check(): Promise<PrimaryState> {
    this.probing ??= this.ask().finally(() => (this.probing = undefined));
    return this.probing;
  }

  private async ask(): Promise<PrimaryState> {
    const timer = deadline(PROBE_TIMEOUT_MS);
    const timedOut = new Promise<'unreachable'>((resolve) =>
      timer.signal.addEventListener('abort', () => resolve('unreachable'), { once: true }),
    );
    let server: string | undefined;
    const asked = this.probe.primaryState().then(
      (row): PrimaryState => {
        server = row.server;
        return row.recovery || row.read_only ? 'read_only' : 'up';
      },
      (): PrimaryState => 'unreachable',
    );
    try {
      const state = await Promise.race([asked, timedOut]);
      this.record(state, server);
      return state;
    } finally {
      timer.clear();
    }
  }

  private record(state: PrimaryState, server: string | undefined): void {
    const now = Date.now();
    if (this.state !== 'up') this.withoutPrimary.inc((now - this.lastTick) / 1000);
    this.lastTick = now;
    this.up.set(state === 'up' ? 1 : 0);
    if (state !== 'up') {
      if (this.state === 'up') {
        this.downSince = now;
        this.logger.warn({
          msg:
            `no primary takes writes (${state === 'read_only' ? 'read-only or a standby' : 'unreachable'}): ` +
            'requests answer 503 with Retry-After until one does',
        });
      }
      this.state = state;
      return;
    }
    const moved = this.server !== undefined && server !== undefined && server !== this.server;
    if (moved) this.failovers.inc();
    if (this.state !== 'up' || moved) {
      const after = this.downSince === undefined ? 0 : (now - this.downSince) / 1000;
      this.logger.log({
        msg: moved
          ? `failover: writes go to another primary (${server}) after ${after.toFixed(1)} s without one`
          : `the primary takes writes again after ${after.toFixed(1)} s`,
      });
    }
    this.state = 'up';
    this.downSince = undefined;
    if (server !== undefined) this.server = server;
  }

  /**
   * Says at start what a failover may lose (docs/operations.md#failover), and refuses to start without a synchronous
   * standby when REQUIRE_SYNCHRONOUS_REPLICATION is true.
   */
  private async checkReplication(): Promise<void> {
    let replication: Awaited<ReturnType<DatabaseProbeRepository['replicationState']>>;
    try {
      replication = await this.probe.replicationState();
    } catch (error) {
      if (this.config.requireSynchronousReplication) throw error;
      this.logger.warn({ msg: 'could not read the replication settings', error: (error as Error).message });
      return;
    }
    const waits = !['off', 'local'].includes(replication.commit);
    const synchronous = waits && replication.standbyNames.trim() !== '' && replication.syncStandbys !== 0;
    const standbys =
      replication.syncStandbys === null
        ? `${replication.standbys} standby(s) connected, their sync state not readable by this role`
        : `${replication.syncStandbys} of ${replication.standbys} connected standby(s) synchronous`;
    const line =
      `replication: ${synchronous ? 'synchronous' : 'asynchronous or none'} ` +
      `(synchronous_commit=${replication.commit}, synchronous_standby_names='${replication.standbyNames}', ` +
      `${standbys}): ` +
      (synchronous
        ? 'a failover loses nothing acknowledged'
        : 'a failover may lose the last moments of writes (docs/operations.md#failover)');
    if (this.config.requireSynchronousReplication && !synchronous) {
      throw new Error(`REQUIRE_SYNCHRONOUS_REPLICATION is true and the primary has no synchronous standby: ${line}`);
    }
    if (synchronous) this.logger.log({ msg: line });
    else this.logger.warn({ msg: line });
  }
}
