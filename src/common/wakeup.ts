/**
 * The sleep of a polling loop that can be cut short: `idle(ms)` resolves after `ms` or at the next `poke()`.
 * A poke that lands while the loop is busy (not idle) is remembered, so the next `idle` returns at once and
 * the loop looks again before sleeping: no wake-up is lost between a look and a sleep.
 */
export class Wakeup {
  private wake?: () => void;
  private woken = false;

  poke(): void {
    this.woken = true;
    this.wake?.();
  }

  idle(ms: number): Promise<void> {
    if (this.woken) {
      this.woken = false;
      return Promise.resolve();
    }
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.wake = undefined;
        this.woken = false;
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.wake = done;
    });
  }
}
