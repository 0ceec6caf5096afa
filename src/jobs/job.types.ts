import { attemptFromRow, type Attempt } from '../attempts/attempt.types.js';

export const JOB_STATUSES = ['pending', 'running', 'unknown', 'succeeded', 'failed', 'cancelled'] as const;
export type JobStatus = (typeof JOB_STATUSES)[number];
export const TERMINAL_JOB_STATUSES: readonly JobStatus[] = ['succeeded', 'failed', 'cancelled'];

export function isTerminal(status: JobStatus): boolean {
  return TERMINAL_JOB_STATUSES.includes(status);
}

export interface Job {
  id: string;
  ownerId: string;
  idempotencyKey: string;
  fingerprint: string;
  operation: string;
  input: Record<string, unknown>;
  providers: string[];
  status: JobStatus;
  version: number;
  result: unknown;
  error: unknown;
  completedBy: string | null;
  createdAt: Date;
  updatedAt: Date;
  completedAt: Date | null;
  /** The W3C traceparent of the creating request (src/telemetry/tracing.ts); never shown by the API. */
  traceContext?: string | null;
}

export interface JobWithAttempts extends Job {
  attempts: Attempt[];
}

type Row = Record<string, unknown>;

export function jobFromRow(row: Row): Job {
  return {
    id: row.id as string,
    ownerId: row.owner_id as string,
    idempotencyKey: row.idempotency_key as string,
    fingerprint: row.fingerprint as string,
    operation: row.operation as string,
    input: row.input as Record<string, unknown>,
    providers: row.providers as string[],
    status: row.status as JobStatus,
    version: row.version as number,
    result: row.result ?? null,
    error: row.error ?? null,
    completedBy: (row.completed_by as string | null) ?? null,
    createdAt: row.created_at as Date,
    updatedAt: row.updated_at as Date,
    completedAt: (row.completed_at as Date | null) ?? null,
    traceContext: (row.trace_context as string | null) ?? null,
  };
}

export function jobWithAttemptsFromRow(row: Row): JobWithAttempts {
  return { ...jobFromRow(row), attempts: ((row.attempts as Row[] | null) ?? []).map(attemptFromRow) };
}
