import { type Attempt, attemptFromRow, type AttemptRow } from './attempt.types.js';

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
  /** The W3C traceparent of the request that created the job: the worker's spans join its trace. Never shown. */
  traceContext?: string | null;
  /** Higher first among the owner's own due jobs (docs/design.md#fair-share). */
  priority: number;
}

/**
 * A job as a list page shows it (issue 22 item 4): a result longer than LIST_RESULT_MAX_BYTES (as JSON text) is
 * left out, `result` null and `resultOmitted` true; the job's own GET carries it.
 */
export interface ListedJob extends Job {
  resultOmitted: boolean;
}

export const LIST_RESULT_MAX_BYTES = 16_384;

export interface JobWithAttempts extends Job {
  attempts: Attempt[];
}

/** A `jobs` row as node-postgres returns it (the columns of JOB_COLUMNS). */
export interface JobRow {
  id: string;
  owner_id: string;
  idempotency_key: string;
  fingerprint: string;
  operation: string;
  input: Record<string, unknown>;
  providers: string[];
  status: JobStatus;
  version: number;
  result: unknown;
  error: unknown;
  completed_by: string | null;
  created_at: Date;
  updated_at: Date;
  completed_at: Date | null;
  trace_context?: string | null;
  priority: number;
  /** Only in list pages' rows. */
  result_omitted?: boolean;
}

export interface JobWithAttemptsRow extends JobRow {
  /** json_agg of the job's attempts: timestamps arrive as text. */
  attempts: AttemptRow[] | null;
}

export function jobFromRow(row: JobRow): Job {
  return {
    id: row.id,
    ownerId: row.owner_id,
    idempotencyKey: row.idempotency_key,
    fingerprint: row.fingerprint,
    operation: row.operation,
    input: row.input,
    providers: row.providers,
    status: row.status,
    version: row.version,
    result: row.result ?? null,
    error: row.error ?? null,
    completedBy: row.completed_by ?? null,
    createdAt: row.created_at,
    updatedAt: row.updated_at,
    completedAt: row.completed_at ?? null,
    traceContext: row.trace_context ?? null,
    priority: row.priority ?? 0,
  };
}

export function listedJobFromRow(row: JobRow): ListedJob {
  return { ...jobFromRow(row), resultOmitted: row.result_omitted === true };
}

export function jobWithAttemptsFromRow(row: JobWithAttemptsRow): JobWithAttempts {
  return { ...jobFromRow(row), attempts: (row.attempts ?? []).map(attemptFromRow) };
}
