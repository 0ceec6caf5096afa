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

export interface StoredJobEvent extends Required<Omit<JobEvent, 'detail'>> {
  id: string;
  detail: unknown;
  at: Date;
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

  async listForJob(jobId: string, manager?: Queryable): Promise<StoredJobEvent[]> {
    const rows: Array<Record<string, unknown>> = await on(this.dataSource, manager).query(
      'SELECT id, job_id, attempt_id, subject, from_status, to_status, reason, detail, at FROM job_events WHERE job_id = $1 ORDER BY id',
      [jobId],
    );
    return rows.map((row) => ({
      id: String(row.id),
      jobId: row.job_id as string,
      attemptId: (row.attempt_id as string | null) ?? null,
      subject: row.subject as 'job' | 'attempt',
      from: (row.from_status as string | null) ?? null,
      to: row.to_status as string,
      reason: row.reason as string,
      detail: row.detail ?? null,
      at: row.at as Date,
    }));
  }
}
