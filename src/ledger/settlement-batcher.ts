import { isDatabaseUnavailable, isRetryableTransactionError } from '../database/pg-errors.js';
import type { ArrivedResultWrite, SettledResult } from './settlement.repository.js';

/** Results one settlement statement takes at most. */
export const SETTLE_BATCH = 64;
/** Settlement statements in flight at once (pool connections they hold). */
export const SETTLE_IN_FLIGHT = 2;

interface Pending {
  write: ArrivedResultWrite;
  resolve: (settled: SettledResult | undefined) => void;
  reject: (error: unknown) => void;
}

/**
 * Group commit for results: results that arrive while settlement statements are in flight (a window of calls
 * that finish together) wait for a free statement and are settled together, each exactly as if alone
 * (SettlementRepository.settleResults). Nothing waits on a timer: a result that finds a statement free goes at
 * the next turn of the event loop, with whatever arrived in the same turn. A batch holds at most one result per
 * job (a second waits for the next batch, so one statement never decides a race between two of its own rows).
 * When a batch fails for a reason other than the database being away or a deadlock, each of its results is
 * settled alone, so one bad result cannot fail the others.
 */
export class SettlementBatcher {
  private readonly queue: Pending[] = [];
  private inFlight = 0;
  private scheduled = false;

  constructor(private readonly settle: (writes: ArrivedResultWrite[]) => Promise<Map<string, SettledResult>>) {}

  submit(write: ArrivedResultWrite): Promise<SettledResult | undefined> {
    return new Promise((resolve, reject) => {
      this.queue.push({ write, resolve, reject });
      this.schedule();
    });
  }

  private schedule(): void {
    if (this.scheduled || this.inFlight >= SETTLE_IN_FLIGHT) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      this.pump();
    });
  }

  private pump(): void {
    while (this.inFlight < SETTLE_IN_FLIGHT && this.queue.length) {
      const batch: Pending[] = [];
      const jobs = new Set<string>();
      for (let i = 0; i < this.queue.length && batch.length < SETTLE_BATCH; ) {
        const item = this.queue[i];
        if (jobs.has(item.write.jobId)) {
          i++;
          continue;
        }
        jobs.add(item.write.jobId);
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

  private async run(batch: Pending[]): Promise<void> {
    try {
      const settled = await this.settle(batch.map((p) => p.write));
      for (const p of batch) p.resolve(settled.get(p.write.attemptId));
    } catch (error) {
      if (batch.length === 1 || isDatabaseUnavailable(error) || isRetryableTransactionError(error)) {
        for (const p of batch) p.reject(error);
        return;
      }
      for (const p of batch) await this.run([p]);
    }
  }
}
