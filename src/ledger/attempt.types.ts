export const ATTEMPT_STATUSES = ['starting', 'running', 'succeeded', 'failed', 'unknown', 'cancelled'] as const;
export type AttemptStatus = (typeof ATTEMPT_STATUSES)[number];
export const LIVE_ATTEMPT_STATUSES: readonly AttemptStatus[] = ['starting', 'running', 'unknown'];
export type AttemptOutcome = 'won' | 'discarded';
/** How an `unknown` attempt ended: the provider's record (a look-up), an operator, or the service's own clocks. */
export const RESOLVED_BY = ['provider', 'operator', 'deadline'] as const;
export type ResolvedBy = (typeof RESOLVED_BY)[number];

/** Reason of an attempt that provably never reached its provider: retried, never counted against maxAttempts. */
export const NOT_SENT = 'not_sent';

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
  /** A rate-limit answer's requested wait (docs/design.md#capacity). */
  retryAfterMs?: number;
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
  /** What the provider last said of the request it keeps by id (docs/design.md#resolution-at-the-provider). */
  providerStatus: string | null;
  providerCheckedAt: Date | null;
  resolvedBy: ResolvedBy | null;
  usage: Usage | null;
  error: AttemptError | null;
  resultDigest: string | null;
  startedAt: Date;
  finishedAt: Date | null;
  /** Priced from usage when it was written (docs/operations.md#cost); null without usage or pricing. */
  cost: number | null;
  costCurrency: string | null;
}

/** An `attempts` row, from a plain query (Date) or from json_agg (timestamps as text). */
export interface AttemptRow {
  id: string;
  job_id: string;
  number: number;
  provider: string;
  status: AttemptStatus;
  outcome: AttemptOutcome | null;
  job_version: number;
  deadline_at: Date | string;
  hard_deadline_at: Date | string;
  claimed_at: Date | string | null;
  worker_id: string | null;
  provider_request_id: string | null;
  /** Absent where a query does not select them. */
  provider_status?: string | null;
  provider_checked_at?: Date | string | null;
  resolved_by?: ResolvedBy | null;
  usage: Usage | null;
  error: AttemptError | null;
  result_digest: string | null;
  started_at: Date | string;
  finished_at: Date | string | null;
  /** numeric: text from a plain query, a number from json_agg; absent where a query does not select it. */
  cost?: string | number | null;
  cost_currency?: string | null;
}

const date = (value: Date | string): Date => (value instanceof Date ? value : new Date(value));
const dateOrNull = (value: Date | string | null | undefined): Date | null =>
  value === null || value === undefined ? null : date(value);

export function attemptFromRow(row: AttemptRow): Attempt {
  return {
    id: row.id,
    jobId: row.job_id,
    number: row.number,
    provider: row.provider,
    status: row.status,
    outcome: row.outcome ?? null,
    jobVersion: row.job_version,
    deadlineAt: date(row.deadline_at),
    hardDeadlineAt: date(row.hard_deadline_at),
    claimedAt: dateOrNull(row.claimed_at),
    workerId: row.worker_id ?? null,
    providerRequestId: row.provider_request_id ?? null,
    providerStatus: row.provider_status ?? null,
    providerCheckedAt: dateOrNull(row.provider_checked_at),
    resolvedBy: row.resolved_by ?? null,
    usage: row.usage ?? null,
    error: row.error ?? null,
    resultDigest: row.result_digest ?? null,
    startedAt: date(row.started_at),
    finishedAt: dateOrNull(row.finished_at),
    cost: row.cost === null || row.cost === undefined ? null : Number(row.cost),
    costCurrency: row.cost_currency ?? null,
  };
}
