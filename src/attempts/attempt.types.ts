export const ATTEMPT_STATUSES = ['starting', 'running', 'succeeded', 'failed', 'unknown', 'cancelled'] as const;
export type AttemptStatus = (typeof ATTEMPT_STATUSES)[number];
export const LIVE_ATTEMPT_STATUSES: readonly AttemptStatus[] = ['starting', 'running', 'unknown'];
export type AttemptOutcome = 'won' | 'discarded';

export interface Usage {
  promptTokens: number;
  completionTokens: number;
}

export interface AttemptError {
  reason: string;
  message: string;
  retryable?: boolean;
  status?: number;
  details?: unknown;
}

export interface Attempt {
  id: string;
  jobId: string;
  number: number;
  provider: string;
  status: AttemptStatus;
  outcome: AttemptOutcome | null;
  jobVersion: number;
  deadlineAt: Date;
  hardDeadlineAt: Date;
  claimedAt: Date | null;
  workerId: string | null;
  providerRequestId: string | null;
  usage: Usage | null;
  error: AttemptError | null;
  resultDigest: string | null;
  startedAt: Date;
  finishedAt: Date | null;
}

type Row = Record<string, unknown>;
const date = (value: unknown): Date => (value instanceof Date ? value : new Date(String(value)));
const dateOrNull = (value: unknown): Date | null => (value === null || value === undefined ? null : date(value));

/** Maps an attempts row, from a plain query or from json_agg (where timestamps come back as text). */
export function attemptFromRow(row: Row): Attempt {
  return {
    id: row.id as string,
    jobId: row.job_id as string,
    number: row.number as number,
    provider: row.provider as string,
    status: row.status as AttemptStatus,
    outcome: (row.outcome as AttemptOutcome | null) ?? null,
    jobVersion: row.job_version as number,
    deadlineAt: date(row.deadline_at),
    hardDeadlineAt: date(row.hard_deadline_at),
    claimedAt: dateOrNull(row.claimed_at),
    workerId: (row.worker_id as string | null) ?? null,
    providerRequestId: (row.provider_request_id as string | null) ?? null,
    usage: (row.usage as Usage | null) ?? null,
    error: (row.error as AttemptError | null) ?? null,
    resultDigest: (row.result_digest as string | null) ?? null,
    startedAt: date(row.started_at),
    finishedAt: dateOrNull(row.finished_at),
  };
}
