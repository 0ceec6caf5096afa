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
}

/** The append-only audit trail of every job and attempt transition (a trigger refuses UPDATE and DELETE). */
@Injectable()
export class JobEventsRepository {
  constructor(private readonly dataSource: DataSource) {}

  async append(events: JobEvent[], manager?: Queryable): Promise<void> {
    if (!events.length) return;
    const values: unknown[] = [];
    const tuples = events.map((event, i) => {
      values.push(event.jobId, event.attemptId ?? null, event.subject, event.from, event.to, event.reason, event.detail === undefined ? null : JSON.stringify(event.detail));
      const p = i * 7;
      return `($${p + 1}, $${p + 2}, $${p + 3}, $${p + 4}, $${p + 5}, $${p + 6}, $${p + 7}::jsonb)`;
    });
    await on(this.dataSource, manager).query(
      `INSERT INTO job_events (job_id, attempt_id, subject, from_status, to_status, reason, detail) VALUES ${tuples.join(', ')}`,
      values,
    );
  }
}
