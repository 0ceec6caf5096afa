import { isDatabaseUnavailable, isRetryableTransactionError } from './pg-errors.js';
import { requestDeadline, retryAllowed, retryWithin } from './request-context.js';

export interface GroupCommitOptions<W, R> {
  /** Writes one statement takes at most. */
  maxBatch: number;
  /** Statements in flight at once (pool connections they hold). */
  maxInFlight: number;
  /** Writes with the same key never share a statement: a second waits for the next one. */
  keyOf: (write: W) => string;
  /** With `maxWeight`: a statement takes writes up to that total weight (always at least one write). */
  weightOf?: (write: W) => number;
  maxWeight?: number;
  /** Commits the writes in one statement; answers one result per write, in their order. */
  commit: (writes: W[]) => Promise<R[]>;
  /**
   * The statement may run twice (its writes are keyed: a second run finds what the first committed): after a lost
   * connection, committed or not, it runs once more on a fresh one instead of failing (docs/operations.md#failover).
   */
  idempotent?: boolean;
}

interface Pending<W, R> {
  write: W;
  resolve: (result: R) => void;
  reject: (error: unknown) => void;
}

/**
 * Group commit: writes that arrive while statements are in flight wait for a free statement and are committed
 * together, each answered as if alone. Nothing waits on a timer: a write that finds a statement free goes at the
 * next turn of the event loop, with whatever arrived in the same turn. A batch holds at most one write per key.
 * When a batch fails for a reason other than the database being away or a deadlock, each of its writes is
 * committed alone, so one bad write cannot fail the others.
 */
export class GroupCommit<W, R> {
  private readonly queue: Array<Pending<W, R>> = [];
  private inFlight = 0;
  private scheduled = false;

  constructor(private readonly options: GroupCommitOptions<W, R>) {}

  submit(write: W): Promise<R> {
    return new Promise((resolve, reject) => {
      this.queue.push({ write, resolve, reject });
      this.schedule();
    });
  }

  private schedule(): void {
    if (this.scheduled || this.inFlight >= this.options.maxInFlight) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      this.pump();
    });
  }

  private pump(): void {
    while (this.inFlight < this.options.maxInFlight && this.queue.length) {
      const { maxBatch, keyOf, weightOf, maxWeight = Infinity } = this.options;
      const batch: Array<Pending<W, R>> = [];
      const keys = new Set<string>();
      let weight = 0;
      for (let i = 0; i < this.queue.length && batch.length < maxBatch;) {
        const item = this.queue[i];
        const key = keyOf(item.write);
        const itemWeight = weightOf?.(item.write) ?? 0;
        if (keys.has(key) || (batch.length > 0 && weight + itemWeight > maxWeight)) {
          i++;
          continue;
        }
        keys.add(key);
        weight += itemWeight;
        batch.push(item);
        this.queue.splice(i, 1);
      }
      this.inFlight++;
      void this.run(batch).finally(() => {
        this.inFlight--;
        if (this.queue.length) this.schedule();
      });
    }
  }

  private async run(batch: Array<Pending<W, R>>): Promise<void> {
    try {
      const results = await this.commitOnce(batch.map((p) => p.write));
      batch.forEach((p, i) => p.resolve(results[i]));
    } catch (error) {
      if (batch.length === 1 || isDatabaseUnavailable(error) || isRetryableTransactionError(error)) {
        for (const p of batch) p.reject(error);
        return;
      }
      for (const p of batch) await this.run([p]);
    }
  }

  private async commitOnce(writes: W[]): Promise<R[]> {
    const deadline = requestDeadline(Date.now());
    try {
      return await this.options.commit(writes);
    } catch (error) {
      if (!this.options.idempotent || !isDatabaseUnavailable(error) || !retryAllowed(deadline)) throw error;
      return retryWithin(deadline, () => this.options.commit(writes));
    }
  }
}
