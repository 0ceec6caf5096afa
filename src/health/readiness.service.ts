import { Inject, Injectable } from '@nestjs/common';

import { deadline } from '../common/deadline.js';
import { DomainError } from '../common/domain.errors.js';
import { DatabaseProbeRepository } from './database-probe.repository.js';
import { Lifecycle } from './lifecycle.js';
import { type PrimaryState, PrimaryWatch } from './primary-watch.js';

/** A probe answers within this; a frozen database must not hold the kubelet's probe past its own timeout. */
const DATABASE_PROBE_MS = 1000;

export class NotReadyError extends DomainError {
  constructor(why: string) {
    super('service_unavailable', 503, why);
  }
}

export interface Readiness {
  /** `degraded`: in service, but no primary takes writes now (requests answer 503 with Retry-After). */
  status: 'ready' | 'degraded';
  database: PrimaryState;
}

/**
 * Readiness is about this process, not about the database (docs/operations.md#probes): once it has started and seen
 * the schema it expects, it stays in service through a database outage, so clients get the documented
 * 503 + Retry-After from every replica instead of connection errors from none. It turns false while starting
 * (migrations not confirmed yet) and from SIGTERM on. The database's state is in the body, for people: `degraded`
 * while no primary takes writes (unreachable, or read-only after a demotion), `ready` again once one does, without a
 * restart (src/health/primary-watch.ts).
 */
@Injectable()
export class ReadinessService {
  /** Set once: a schema seen complete stays complete for this code (migrations only add). */
  private schemaConfirmed = false;

  constructor(
    private readonly probe: DatabaseProbeRepository,
    @Inject(Lifecycle) private readonly lifecycle: Lifecycle,
    private readonly watch: PrimaryWatch,
  ) {}

  async check(): Promise<Readiness> {
    if (this.lifecycle.shuttingDown) throw new NotReadyError('The service is shutting down.');
    if (!this.schemaConfirmed) {
      const applied = await this.bounded(() => this.probe.migrationsApplied());
      if (applied === 'unreachable') {
        throw new NotReadyError('The service is starting: the database has not answered yet.');
      }
      if (!applied) throw new NotReadyError('Database migrations are pending.');
      this.schemaConfirmed = true;
    }
    const database = await this.watch.check();
    return { status: database === 'up' ? 'ready' : 'degraded', database };
  }

  /** The work's value, or 'unreachable' when it failed or did not answer in time (it may go on in the background). */
  private async bounded<T>(work: () => Promise<T>): Promise<T | 'unreachable'> {
    const timer = deadline(DATABASE_PROBE_MS);
    const timedOut = new Promise<'unreachable'>((resolve) =>
      timer.signal.addEventListener('abort', () => resolve('unreachable'), { once: true }),
    );
    try {
      return await Promise.race([work().catch(() => 'unreachable' as const), timedOut]);
    } finally {
      timer.clear();
    }
  }
}
