import { Inject, Injectable, Logger, type OnApplicationBootstrap, type OnApplicationShutdown } from '@nestjs/common';
import pg from 'pg';
import { DataSource } from 'typeorm';
import { appConfig, type AppConfig } from '../config/app.config.js';
import { sessionDatabaseUrl } from '../database/session-url.js';

const DUE = 'onejob_due';
const SETTLED = 'onejob_settled';
/** NOTIFY payloads are limited to 8,000 bytes: 200 uuids and their commas fit. */
const IDS_PER_NOTIFY = 200;
/** Signals raised within this window share one NOTIFY (each NOTIFY is a commit on the notification queue). */
const COALESCE_MS = 10;
const RECONNECT_MS = 2000;

/**
 * Wake-ups across replicas (docs/design.md#7-execution): `onejob_due` when a job becomes claimable (created,
 * rescheduled), `onejob_settled` with the ids of jobs that became terminal. Raised after commit, coalesced into
 * one NOTIFY per few milliseconds and sent on the pool (NOTIFY works through a transaction pooler), so no job
 * transaction ever waits on the notification queue's lock. LISTEN needs a session connection: it uses
 * DATABASE_DIRECT_URL when set. A missed NOTIFY costs latency, never a job: workers and waiters fall back to
 * polling, and while nothing is listening they poll at their fallback period.
 */
@Injectable()
export class JobSignals implements OnApplicationBootstrap, OnApplicationShutdown {
  private readonly logger = new Logger(JobSignals.name);
  private readonly waiters = new Map<string, Set<() => void>>();
  private readonly dueListeners = new Set<() => void>();
  private readonly settledToSend = new Set<string>();
  private dueToSend = false;
  private flushTimer?: NodeJS.Timeout;
  private client?: pg.Client;
  private reconnectTimer?: NodeJS.Timeout;
  private stopped = false;
  private warned = false;
  /** True while a LISTEN session is up: waiters then need no polling. */
  listening = false;

  constructor(
    @Inject(appConfig.KEY) private readonly config: AppConfig,
    private readonly dataSource: DataSource,
  ) {}

  onApplicationBootstrap(): void {
    void this.listen();
  }

  async onApplicationShutdown(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.reconnectTimer);
    clearTimeout(this.flushTimer);
    await this.flush();
    const client = this.client;
    this.client = undefined;
    this.listening = false;
    await client?.end().catch(() => undefined);
  }

  /** A job became claimable. Local workers wake at once; other replicas by NOTIFY. */
  jobsDue(): void {
    this.wakeDue();
    this.dueToSend = true;
    this.scheduleFlush();
  }

  /** A job became terminal. Local waiters wake at once; other replicas' by NOTIFY. */
  jobSettled(jobId: string): void {
    this.wakeJob(jobId);
    this.settledToSend.add(jobId);
    this.scheduleFlush();
  }

  /** Called whenever a job may be claimable; returns the unsubscribe. */
  onDue(listener: () => void): () => void {
    this.dueListeners.add(listener);
    return () => this.dueListeners.delete(listener);
  }

  /**
   * A waiter for the job's settlement (here or on another replica), registered now: read the job after this, so
   * a settlement between the read and the wait is not missed. `done` resolves on settlement, after `ms`, or when
   * `signal` aborts; `cancel` drops the waiter.
   */
  waitFor(jobId: string, ms: number, signal?: AbortSignal): { done: Promise<void>; cancel: () => void } {
    let cancel!: () => void;
    const done = new Promise<void>((resolve) => {
      const set = this.waiters.get(jobId) ?? new Set<() => void>();
      this.waiters.set(jobId, set);
      const wake = () => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', wake);
        set.delete(wake);
        if (!set.size && this.waiters.get(jobId) === set) this.waiters.delete(jobId);
        resolve();
      };
      const timer = setTimeout(wake, ms);
      signal?.addEventListener('abort', wake, { once: true });
      set.add(wake);
      cancel = wake;
    });
    return { done, cancel };
  }

  private wakeJob(jobId: string): void {
    const set = this.waiters.get(jobId);
    if (!set) return;
    this.waiters.delete(jobId);
    for (const wake of set) wake();
  }

  private wakeDue(): void {
    for (const listener of this.dueListeners) listener();
  }

  private scheduleFlush(): void {
    this.flushTimer ??= setTimeout(() => void this.flush(), COALESCE_MS);
  }

  private async flush(): Promise<void> {
    this.flushTimer = undefined;
    const ids = [...this.settledToSend];
    const due = this.dueToSend;
    this.settledToSend.clear();
    this.dueToSend = false;
    const payloads: Array<[string, string]> = [];
    if (due) payloads.push([DUE, '']);
    for (let i = 0; i < ids.length; i += IDS_PER_NOTIFY) payloads.push([SETTLED, ids.slice(i, i + IDS_PER_NOTIFY).join(',')]);
    if (!payloads.length || !this.dataSource.isInitialized) return;
    const selects = payloads.map((_, i) => `pg_notify($${2 * i + 1}, $${2 * i + 2})`).join(', ');
    // Best effort: a lost NOTIFY only delays a wake-up until the next poll.
    await this.dataSource.query(`SELECT ${selects}`, payloads.flat()).catch(() => undefined);
  }

  private async listen(): Promise<void> {
    const url = sessionDatabaseUrl(this.config);
    if (this.stopped || !url) return;
    const client = new pg.Client({ connectionString: url, application_name: `onejob-${this.config.role}-listen`, connectionTimeoutMillis: 3000 });
    client.on('notification', (message) => {
      if (message.channel === DUE) this.wakeDue();
      else if (message.channel === SETTLED) for (const id of (message.payload ?? '').split(',')) if (id) this.wakeJob(id);
    });
    const lost = (error?: Error) => {
      if (this.client !== client) return;
      this.client = undefined;
      this.listening = false;
      client.end().catch(() => undefined);
      if (this.stopped) return;
      this.logger.warn({ msg: 'LISTEN connection lost: polling until it is back', error: error?.message });
      // Anything raised while nobody listened: look once.
      this.wakeDue();
      for (const id of [...this.waiters.keys()]) this.wakeJob(id);
      this.reconnectTimer = setTimeout(() => void this.listen(), RECONNECT_MS);
    };
    client.on('error', lost);
    client.on('end', () => lost());
    try {
      await client.connect();
      await client.query(`LISTEN ${DUE}; LISTEN ${SETTLED}`);
      if (this.stopped) {
        await client.end();
        return;
      }
      this.client = client;
      this.listening = true;
      if (this.warned) this.logger.log({ msg: 'LISTEN connection back: wake-ups by NOTIFY' });
      this.warned = false;
      // Whatever was raised before we listened: look once.
      this.wakeDue();
    } catch (error) {
      client.removeAllListeners('end');
      client.end().catch(() => undefined);
      if (!this.warned) {
        this.logger.warn({ msg: 'LISTEN failed: falling back to polling (set DATABASE_DIRECT_URL behind a transaction pooler)', error: (error as Error).message });
        this.warned = true;
      }
      if (!this.stopped) this.reconnectTimer = setTimeout(() => void this.listen(), RECONNECT_MS);
    }
  }
}
