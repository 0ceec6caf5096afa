import { Injectable, type OnApplicationShutdown } from '@nestjs/common';
import { DataSource } from 'typeorm';

import { PgNotifications } from '../database/pg-notifications.js';
import { NOTIFY_SIGNALS } from './job-signals.sql.js';

const DUE = 'onejob_due';
const SETTLED = 'onejob_settled';
/** Ids whose timeline got new rows (docs/design.md#live-streams): job ids, or another timeline's own id. */
const EVENTS = 'onejob_events';
/** NOTIFY payloads are limited to 8,000 bytes: 200 uuids and their commas fit. */
const IDS_PER_NOTIFY = 200;
/** Signals raised within this window share one NOTIFY (each NOTIFY is a commit on the notification queue). */
const COALESCE_MS = 10;

/**
 * Wake-ups across replicas (docs/design.md#flow): `onejob_due` when a job becomes claimable (created,
 * rescheduled), `onejob_settled` with the ids of jobs that became terminal, `onejob_events` with the ids of jobs
 * whose timeline got rows (a settled job's id goes in `onejob_settled` only). Raised after commit, coalesced into
 * one NOTIFY per few milliseconds and sent on the pool (NOTIFY works through a transaction pooler), so no job
 * transaction ever waits on the notification queue's lock. Heard through the process's LISTEN session
 * (PgNotifications). A missed NOTIFY costs latency, never a job: workers and waiters fall back to polling, and
 * while nothing is listening they poll at their fallback period.
 */
@Injectable()
export class JobSignals implements OnApplicationShutdown {
  private readonly waiters = new Map<string, Set<() => void>>();
  private readonly dueListeners = new Set<(waitingFor: string[]) => void>();
  private readonly eventListeners = new Set<(ids: string[] | null) => void>();
  private readonly settledToSend = new Set<string>();
  private readonly eventsToSend = new Set<string>();
  /** '' for jobs any worker may claim; a provider's name for jobs born waiting for its capacity. */
  private readonly dueToSend = new Set<string>();
  private flushTimer?: NodeJS.Timeout;

  constructor(
    private readonly dataSource: DataSource,
    private readonly notifications: PgNotifications,
  ) {
    notifications.subscribe(DUE, (payload) => this.wakeDue(payload.split(',')));
    notifications.subscribe(SETTLED, (payload) => {
      const ids = payload.split(',').filter(Boolean);
      for (const id of ids) this.wakeJob(id);
      this.wakeEvents(ids);
    });
    notifications.subscribe(EVENTS, (payload) => this.wakeEvents(payload.split(',').filter(Boolean)));
    notifications.onStateChange(() => {
      // Up: whatever was raised before we listened; down: what we may miss from now on. Either way, look once.
      this.wakeDue(['']);
      for (const id of [...this.waiters.keys()]) this.wakeJob(id);
      this.wakeEvents(null);
    });
  }

  /** True while the LISTEN session is up: waiters then need no polling. */
  get listening(): boolean {
    return this.notifications.listening;
  }

  async onApplicationShutdown(): Promise<void> {
    clearTimeout(this.flushTimer);
    await this.flush();
  }

  /**
   * A job became claimable. Local workers wake at once; other replicas by NOTIFY. `waitingFor`: the job was born
   * waiting for capacity on that provider, and only a worker that sees room on it needs to wake.
   */
  jobsDue(waitingFor?: string | null): void {
    const key = waitingFor ?? '';
    this.wakeDue([key]);
    this.dueToSend.add(key);
    this.scheduleFlush();
  }

  /**
   * Capacity this process held became free (a lease given back): its own workers wake to use it. Other replicas
   * are not told: each refills the capacity it gives back, and a crashed replica's expired leases are found by the
   * others' polls. One NOTIFY per call would have every replica race for every freed slot.
   */
  capacityFreed(): void {
    this.wakeDue(['']);
  }

  /** A job became terminal. Local waiters wake at once; other replicas' by NOTIFY. */
  jobSettled(jobId: string): void {
    this.wakeJob(jobId);
    this.wakeEvents([jobId]);
    this.settledToSend.add(jobId);
    this.scheduleFlush();
  }

  /**
   * Rows were committed to these timelines (job ids; a batch's own id for its progress). Local streams wake at
   * once, other replicas' by NOTIFY. Best effort like every wake-up: a stream never depends on it (it re-reads
   * when the LISTEN session changes state, and its process sweeps every stream now and then).
   */
  eventsWritten(ids: Iterable<string>): void {
    const list = [...ids];
    if (!list.length) return;
    this.wakeEvents(list);
    for (const id of list) this.eventsToSend.add(id);
    this.scheduleFlush();
  }

  /** Called with the ids of timelines that got rows, or null when any may have (the LISTEN session changed state). */
  onEvents(listener: (ids: string[] | null) => void): () => void {
    this.eventListeners.add(listener);
    return () => this.eventListeners.delete(listener);
  }

  /** Called whenever a job may be claimable, with what it waits for ('' for nothing); returns the unsubscribe. */
  onDue(listener: (waitingFor: string[]) => void): () => void {
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

  private wakeEvents(ids: string[] | null): void {
    for (const listener of this.eventListeners) listener(ids);
  }

  private wakeDue(waitingFor: string[]): void {
    for (const listener of this.dueListeners) listener(waitingFor);
  }

  private scheduleFlush(): void {
    this.flushTimer ??= setTimeout(() => void this.flush(), COALESCE_MS);
  }

  private async flush(): Promise<void> {
    this.flushTimer = undefined;
    const ids = [...this.settledToSend];
    // A settled job's NOTIFY wakes its streams too: its id need not travel twice.
    const events = [...this.eventsToSend].filter((id) => !this.settledToSend.has(id));
    const due = [...this.dueToSend];
    this.settledToSend.clear();
    this.eventsToSend.clear();
    this.dueToSend.clear();
    const payloads: Array<[string, string]> = [];
    if (due.length) payloads.push([DUE, due.join(',')]);
    for (let i = 0; i < ids.length; i += IDS_PER_NOTIFY) {
      payloads.push([SETTLED, ids.slice(i, i + IDS_PER_NOTIFY).join(',')]);
    }
    for (let i = 0; i < events.length; i += IDS_PER_NOTIFY) {
      payloads.push([EVENTS, events.slice(i, i + IDS_PER_NOTIFY).join(',')]);
    }
    if (!payloads.length || !this.dataSource.isInitialized) return;
    // Best effort: a lost NOTIFY only delays a wake-up until the next poll.
    await this.dataSource.query(NOTIFY_SIGNALS.build(payloads.length), payloads.flat()).catch(() => undefined);
  }
}
