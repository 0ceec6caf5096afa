import { Inject, Injectable } from '@nestjs/common';

import { DomainError } from '../common/domain.errors.js';
import { type AppConfig, appConfig } from '../config/app.config.js';

export class TooManyBatchesError extends DomainError {
  constructor(scope: 'process' | 'owner') {
    super(
      'service_unavailable',
      503,
      scope === 'process'
        ? 'This process is writing MAX_CONCURRENT_BATCHES batches; retry (another replica may have room).'
        : "This owner's MAX_CONCURRENT_BATCHES_PER_OWNER batches are being written here; retry when one is done.",
    );
  }
}

/**
 * The admission bound of batch creates (docs/design.md#batches): each holds a pool connection for its whole
 * transaction, up to 16 MiB of body, and its uncommitted keys and FOR SHARE locks, on which other owners' creates
 * and settlements of the same keys wait. MAX_CONCURRENT_BATCHES per process and MAX_CONCURRENT_BATCHES_PER_OWNER
 * per owner run at once; one more is refused at once (503 + Retry-After), never queued: a queue would hold the
 * bodies it bounds. The process's slot is taken when the request arrives, before its body is read and parsed
 * (configureApp's onRequest hook), and given back when its response ends; the owner's once the key is known (the
 * service), before validation.
 */
@Injectable()
export class BatchAdmission {
  private running = 0;
  private readonly perOwner = new Map<string, number>();

  constructor(@Inject(appConfig.KEY) private readonly config: AppConfig) {}

  /** Takes one of the process's slots, or throws TooManyBatchesError; returns what gives it back (once). */
  admitRequest(): () => void {
    if (this.running >= this.config.maxConcurrentBatches) throw new TooManyBatchesError('process');
    this.running++;
    return once(() => this.running--);
  }

  /** Takes one of the owner's slots, or throws TooManyBatchesError; returns what gives it back (once). */
  admitOwner(ownerId: string): () => void {
    const owned = this.perOwner.get(ownerId) ?? 0;
    if (owned >= this.config.maxConcurrentBatchesPerOwner) throw new TooManyBatchesError('owner');
    this.perOwner.set(ownerId, owned + 1);
    return once(() => {
      const left = (this.perOwner.get(ownerId) ?? 1) - 1;
      if (left) this.perOwner.set(ownerId, left);
      else this.perOwner.delete(ownerId);
    });
  }
}

function once(release: () => void): () => void {
  let released = false;
  return () => {
    if (released) return;
    released = true;
    release();
  };
}
