import { Injectable } from '@nestjs/common';
import { DataSource } from 'typeorm';

import { on, type Queryable } from '../database/transactions.js';

export interface JobEvent {
  jobId: string;
  attemptId?: string | null;
  subject: 'job' | 'attempt';
  from: string | null;
  to: string;
  reason: string;
  detail?: unknown;
  /** The operator's key behind the transition, when a person caused it (docs/design.md#operators). */
  actor?: { keyId: string; ownerId: string };
}

/** The append-only audit trail of every job and attempt transition (a trigger refuses UPDATE and DELETE). */
@Injectable()
export class JobEventsRepository {
  constructor(private readonly dataSource: DataSource) {}

  async append(events: JobEvent[], manager?: Queryable): Promise<void> {
    if (!events.length) return;
    const values: unknown[] = [];
    const tuples = events.map((event, i) => {
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
      );
      const p = i * 9;
      return `($${p + 1}, $${p + 2}, $${p + 3}, $${p + 4}, $${p + 5}, $${p + 6}, $${p + 7}::jsonb, $${p + 8}::uuid, $${p + 9})`;
    });
    await on(this.dataSource, manager).query(
      `INSERT INTO job_events (job_id, attempt_id, subject, from_status, to_status, reason, detail, actor_key_id, actor_owner) VALUES ${tuples.join(', ')}`,
      values,
    );
  }
}
