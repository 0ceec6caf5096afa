import type { Logger } from '@nestjs/common';

import { isDatabaseUnavailable } from './pg-errors.js';

/** The first retry after a loss, and the longest wait between two: a failover takes seconds, not minutes. */
const FIRST_BACKOFF_MS = 250;
const MAX_BACKOFF_MS = 5_000;

/**
 * One background loop's view of its database (docs/operations.md#failover): every loop that talks to PostgreSQL on
 * its own schedule (the claim, the reconciler, the webhook dispatcher, retention, the recertifier, and any loop
 * added later) keeps one. A failure that is the database being away (pg-errors.ts `isDatabaseUnavailable`: a lost
 * or refused connection, a server shutting down, one that went read-only) is logged once, when the outage starts;
 * the loop then waits `backoffMs()` (doubling, with jitter, up to 5 s) before its next try; its first success
 * after logs once that it is back, and how long it was without. Any other error is the caller's to log.
 *
 * A new loop: `const outage = new DatabaseOutage(logger, 'the claim loop')`; in its catch, `if (outage.failed(e))`
 * wait `outage.backoffMs()` (or skip ticks until `outage.retryDue()`), else log the error; after a pass that
 * reached the database, `outage.recovered()`, and then sweep for what it may have missed while away.
 */
export class DatabaseOutage {
  private since?: number;
  private failures = 0;
  private nextTryAt = 0;

  constructor(
    private readonly logger: Logger,
    private readonly loop: string,
  ) {}

  /** True while the last try failed for the database being away. */
  get down(): boolean {
    return this.since !== undefined;
  }

  /** Records a failure; true when it is the database being away (then logged once per outage, and backed off). */
  failed(error: unknown): boolean {
    if (!isDatabaseUnavailable(error)) return false;
    this.failures++;
    if (this.since === undefined) {
      this.since = Date.now();
      this.logger.warn({
        msg: `${this.loop} lost its database: retrying with back-off`,
        error: (error as Error)?.message,
      });
    }
    this.nextTryAt = Date.now() + this.backoffMs();
    return true;
  }

  /** A try reached the database: logs the end of an outage once. True when one just ended (time to sweep). */
  recovered(): boolean {
    if (this.since === undefined) return false;
    const seconds = ((Date.now() - this.since) / 1000).toFixed(1);
    this.logger.log({ msg: `${this.loop} has its database back after ${seconds} s`, failures: this.failures });
    this.since = undefined;
    this.failures = 0;
    this.nextTryAt = 0;
    return true;
  }

  /** The wait before the next try: doubling from 250 ms to 5 s, with up to a quarter of jitter. */
  backoffMs(): number {
    if (!this.failures) return 0;
    const base = Math.min(MAX_BACKOFF_MS, FIRST_BACKOFF_MS * 2 ** Math.min(this.failures - 1, 10));
    return Math.round(base * (0.75 + Math.random() * 0.25));
  }

  /** For loops on a fixed timer: whether the back-off since the last failure has passed. */
  retryDue(): boolean {
    return Date.now() >= this.nextTryAt;
  }
}
