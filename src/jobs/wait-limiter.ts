import { Inject, Injectable } from '@nestjs/common';

import { DomainError } from '../common/domain.errors.js';
import { type AppConfig, appConfig } from '../config/app.config.js';

export class TooManyWaitsError extends DomainError {
  constructor() {
    super(
      'service_unavailable',
      503,
      'Too many requests are holding a `Prefer: wait` here; retry, or poll without waiting.',
    );
  }
}

/**
 * Bounds the `Prefer: wait` requests one process holds at once (MAX_CONCURRENT_WAITS); beyond it, 503 + Retry-After.
 */
@Injectable()
export class WaitLimiter {
  private active = 0;

  constructor(@Inject(appConfig.KEY) private readonly config: AppConfig) {}

  /** Takes a slot or throws; the returned function gives it back (call it once). */
  acquire(): () => void {
    if (this.active >= this.config.maxConcurrentWaits) throw new TooManyWaitsError();
    this.active++;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.active--;
    };
  }
}
