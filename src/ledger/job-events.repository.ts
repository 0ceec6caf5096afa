import { Injectable } from '@nestjs/common';
import { DataSource } from 'typeorm';

import { on, type Queryable } from '../database/transactions.js';
import { APPEND_EVENTS } from './job-events.sql.js';

export interface JobEvent {
  jobId: string;
  attemptId?: string | null;
  subject: 'job' | 'attempt';
  from: string | null;
  to: string;
  reason: string;
  detail?: unknown;
  /** The operator behind the transition, when a person caused it (docs/design.md#operators). */
  actor?: EventActor;
}

/** Who acted: an API key's id, or a token's subject and issuer, with the acting owner. */
export interface EventActor {
  ownerId: string;
  keyId: string | null;
  subject: string | null;
  issuer: string | null;
}

/** The append-only audit trail of every job and attempt transition (a trigger refuses UPDATE and DELETE). */
@Injectable()
export class JobEventsRepository {
  constructor(private readonly dataSource: DataSource) {}

  async append(events: JobEvent[], manager?: Queryable): Promise<void> {
    if (!events.length) return;
    const values: unknown[] = [];
    for (const event of events) {
      const detail = event.detail === undefined ? null : JSON.stringify(event.detail);
      values.push(
        event.jobId,
        event.attemptId ?? null,
        event.subject,
        event.from,
        event.to,
        event.reason,
        detail,
        event.actor?.keyId ?? null,
        event.actor?.ownerId ?? null,
        event.actor?.subject ?? null,
        event.actor?.issuer ?? null,
      );
    }
    await on(this.dataSource, manager).query(APPEND_EVENTS.build(events.length), values);
  }
}
