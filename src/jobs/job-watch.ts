import { Injectable } from '@nestjs/common';

/**
 * Wakes `Prefer: wait` requests in this process as soon as a job they wait on changes. Settlements in other
 * processes are seen by the waiter's own polling, so this is a shortcut, never the only path.
 */
@Injectable()
export class JobWatch {
  private readonly waiters = new Map<string, Set<() => void>>();

  notify(jobId: string): void {
    const set = this.waiters.get(jobId);
    if (!set) return;
    this.waiters.delete(jobId);
    for (const wake of set) wake();
  }

  /** Resolves when `notify(jobId)` is called or after `ms`, whichever comes first. */
  next(jobId: string, ms: number): Promise<void> {
    return new Promise((resolve) => {
      const set = this.waiters.get(jobId) ?? new Set<() => void>();
      this.waiters.set(jobId, set);
      const wake = () => {
        clearTimeout(timer);
        set.delete(wake);
        if (!set.size && this.waiters.get(jobId) === set) this.waiters.delete(jobId);
        resolve();
      };
      const timer = setTimeout(wake, ms);
      set.add(wake);
    });
  }
}
