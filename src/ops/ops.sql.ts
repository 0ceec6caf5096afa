import { dynamic, statement } from '../database/prepared-statements.js';
import type { JobWithAttemptsRow } from '../ledger/job.types.js';
import { listedJobColumns } from '../ledger/job-columns.js';

/**
 * The operators' reads, across owners: their statements (docs/sql/ops.sql). Read-only, all of them: an operator's
 * writes go through the Ledger like anyone else's.
 */

/** One row of a job's timeline, as job_events stores it. */
export interface JobEventRow {
  id: string;
  job_id: string;
  attempt_id: string | null;
  subject: 'job' | 'attempt';
  from_status: string | null;
  to_status: string;
  reason: string;
  detail: unknown;
  at: Date;
  actor_key_id: string | null;
  actor_owner: string | null;
  actor_subject: string | null;
  actor_issuer: string | null;
}

/** What a live stream of a job needs to know before it starts: whose job, and whether (since when) it is over. */
export interface TimelineStateRow {
  owner_id: string;
  status: string;
  /** Milliseconds since the epoch, by the database's clock (as the events' `at`). */
  completed_ms: number | null;
  now_ms: number;
}

export interface WaitingAttemptRow {
  id: string;
  job_id: string;
  owner_id: string;
  operation: string;
  provider: string;
  number: number;
  status: string;
  deadline_at: Date;
  started_at: Date;
  waiting_since: Date;
  waited_seconds: number;
  provider_request_id: string | null;
  error: unknown;
}

export interface MinuteRow {
  at: Date;
  created: number;
  succeeded: number;
  failed: number;
  cancelled: number;
  attempts: number;
  p50_ms: number | null;
  p95_ms: number | null;
}

export interface ProviderHealthRow {
  provider: string;
  attempts: number;
  succeeded: number;
  failed: number;
  timeouts: number;
  unknown_now: number;
  cancelled: number;
  discarded: number;
  p95_ms: number | null;
}

/** The ops' own job columns (no trace_context: ledger/job-columns.ts's JOB_COLUMNS has it). */
const JOB_COLUMNS = `j.id, j.owner_id, j.idempotency_key, j.fingerprint, j.operation, j.input, j.providers, j.status,
  j.version,
  j.result, j.error, j.completed_by, j.created_at, j.updated_at, j.completed_at, j.priority`;

/** How long an attempt has waited: since it became unknown (its event), else since it started. */
const WAITING_SINCE = `COALESCE((SELECT max(e.at) FROM job_events e
  WHERE e.job_id = a.job_id AND e.attempt_id = a.id AND e.subject = 'attempt' AND e.to_status = 'unknown'),
    a.started_at)`;

/** Any owner's job with its attempts. */
export const OPS_JOB_WITH_ATTEMPTS = statement<[id: string], JobWithAttemptsRow>(
  'ops_job_with_attempts',
  `SELECT ${JOB_COLUMNS}, COALESCE((SELECT json_agg(a ORDER BY a.number) FROM attempts a WHERE a.job_id = j.id),
        '[]'::json) AS attempts
         FROM jobs j WHERE j.id = $1`,
);

/** Any job's owner. */
export const OPS_JOB_OWNER = statement<[id: string], { owner_id: string }>(
  'ops_job_owner',
  'SELECT owner_id FROM jobs WHERE id = $1',
);

/** A job list page's cursor: the job it names, whoever's. */
export const OPS_JOB_CURSOR = statement<[id: string], { '?column?': number }>(
  'ops_job_cursor',
  'SELECT 1 FROM jobs WHERE id = $1',
);

/**
 * A page of every owner's jobs, newest first, keyset on (created_at, id). $1 is the limit; each filter the call has
 * takes the next parameter, in this order: owner, status, idempotency key, cursor (shown with all four).
 */
export const LIST_OPS_JOBS = dynamic(
  'list_ops_jobs',
  (owner: boolean, status: boolean, idempotencyKey: boolean, after: boolean) => {
    const where: string[] = [];
    let n = 1;
    if (owner) where.push(`j.owner_id = $${++n}`);
    if (status) where.push(`j.status = $${++n}`);
    if (idempotencyKey) where.push(`j.idempotency_key = $${++n}`);
    if (after) where.push(`(j.created_at, j.id) < (SELECT c.created_at, c.id FROM jobs c WHERE c.id = $${n + 1})`);
    return `SELECT ${listedJobColumns(JOB_COLUMNS)} FROM jobs j ${where.length ? `WHERE ${where.join(' AND ')}` : ''}
        ORDER BY j.created_at DESC, j.id DESC LIMIT $1`;
  },
  true,
  true,
  true,
  true,
);

/** The job's owner and end, with the database's clock (a stream's grace is timed by it). */
export const JOB_TIMELINE_STATE = statement<[id: string], TimelineStateRow>(
  'job_timeline_state',
  `SELECT owner_id, status, (extract(epoch FROM completed_at) * 1000)::float8 AS completed_ms,
              (extract(epoch FROM clock_timestamp()) * 1000)::float8 AS now_ms
         FROM jobs WHERE id = $1`,
);

/** The latest event id of each of these jobs (IDX_job_events_job): the streams' sweep, one query for all. */
export const LATEST_EVENT_IDS = statement<[jobIds: string[]], { job_id: string; id: string }>(
  'latest_event_ids',
  `SELECT e.job_id, l.id::text AS id FROM unnest($1::uuid[]) AS e(job_id)
         CROSS JOIN LATERAL (SELECT max(x.id) AS id FROM job_events x WHERE x.job_id = e.job_id) l
        WHERE l.id IS NOT NULL`,
);

/** The job's events in the order they happened, after the event $2 (exclusive). */
export const LIST_JOB_EVENTS_AFTER = statement<[jobId: string, afterId: string, limit: number], JobEventRow>(
  'list_job_events_after',
  `SELECT id::text AS id, job_id, attempt_id, subject, from_status, to_status, reason, detail, at, actor_key_id,
        actor_owner, actor_subject, actor_issuer
         FROM job_events e WHERE e.job_id = $1 AND e.id > $2::bigint ORDER BY e.id LIMIT $3`,
);

/** An attempt queue page's cursor: the attempt it names. */
export const OPS_ATTEMPT_CURSOR = statement<[id: string], { '?column?': number }>(
  'ops_attempt_cursor',
  'SELECT 1 FROM attempts WHERE id = $1',
);

/**
 * Live attempts of every owner in status $1, oldest deadline first (IDX_attempts_live_deadline), keyset on
 * (deadline_at, id); $2 is the limit. Each filter the call has takes the next parameter, in this order: provider,
 * waited at least (seconds), cursor (shown with all three).
 */
export const LIST_WAITING_ATTEMPTS = dynamic(
  'list_waiting_attempts',
  (provider: boolean, olderThan: boolean, after: boolean) => {
    const where = ['a.status = $1'];
    let n = 2;
    if (provider) where.push(`a.provider = $${++n}`);
    if (olderThan) where.push(`${WAITING_SINCE} <= now() - make_interval(secs => $${++n}::float8)`);
    const cursor = `(SELECT c.deadline_at, c.id FROM attempts c WHERE c.id = $${n + 1})`;
    if (after) where.push(`(a.deadline_at, a.id) > ${cursor}`);
    return `SELECT s.*, GREATEST(0, extract(epoch FROM now() - s.waiting_since))::float8 AS waited_seconds
         FROM (SELECT a.id, a.job_id, j.owner_id, j.operation, a.provider, a.number, a.status, a.deadline_at,
           a.started_at,
                      a.provider_request_id, a.error, ${WAITING_SINCE} AS waiting_since
                 FROM attempts a JOIN jobs j ON j.id = a.job_id
                WHERE ${where.join(' AND ')}
                ORDER BY a.deadline_at, a.id LIMIT $2) s
        ORDER BY s.deadline_at, s.id`;
  },
  true,
  true,
  true,
);

/**
 * Per minute over the last $1 minutes: jobs created and settled, attempts answered and their latency. The time
 * bounds use IDX_jobs_created and the BRIN indexes on jobs.completed_at and attempts.started_at; an attempt that
 * ran longer than an hour is left out of the latency (no provider deadline is that long).
 */
export const JOBS_PER_MINUTE = statement<[minutes: number], MinuteRow>(
  'jobs_per_minute',
  `WITH span AS (SELECT date_trunc('minute', now()) - make_interval(mins => $1::int - 1) AS since),
       buckets AS (SELECT generate_series((SELECT since FROM span), date_trunc('minute', now()),
         interval '1 minute') AS at),
       created AS (
         SELECT date_trunc('minute', created_at) AS at, count(*)::int AS n FROM jobs
          WHERE created_at >= (SELECT since FROM span) GROUP BY 1),
       settled AS (
         SELECT date_trunc('minute', completed_at) AS at,
                count(*) FILTER (WHERE status = 'succeeded')::int AS succeeded,
                count(*) FILTER (WHERE status = 'failed')::int AS failed,
                count(*) FILTER (WHERE status = 'cancelled')::int AS cancelled
           FROM jobs WHERE completed_at >= (SELECT since FROM span) GROUP BY 1),
       answered AS (
         SELECT date_trunc('minute', finished_at) AS at, count(*)::int AS n,
                percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM finished_at - started_at) * 1000) AS p50,
                percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM finished_at - started_at) * 1000) AS p95
           FROM attempts
          WHERE started_at >= (SELECT since FROM span) - interval '1 hour' AND finished_at >= (SELECT since FROM span)
            AND status IN ('succeeded', 'failed') AND claimed_at IS NOT NULL
          GROUP BY 1)
       SELECT b.at, COALESCE(c.n, 0) AS created, COALESCE(s.succeeded, 0) AS succeeded, COALESCE(s.failed, 0) AS failed,
              COALESCE(s.cancelled, 0) AS cancelled, COALESCE(x.n, 0) AS attempts, x.p50::float8 AS p50_ms,
                x.p95::float8 AS p95_ms
         FROM buckets b LEFT JOIN created c USING (at) LEFT JOIN settled s USING (at) LEFT JOIN answered x USING (at)
        ORDER BY b.at`,
);

/** Each provider's attempts started in the last $1 minutes, by what became of them. */
export const PROVIDER_HEALTH = statement<[minutes: number], ProviderHealthRow>(
  'provider_health',
  `SELECT a.provider, count(*)::int AS attempts,
              count(*) FILTER (WHERE a.status = 'succeeded')::int AS succeeded,
              count(*) FILTER (WHERE a.status = 'failed')::int AS failed,
              count(*) FILTER (WHERE EXISTS (SELECT 1 FROM job_events e
                                              WHERE e.job_id = a.job_id AND e.attempt_id = a.id
                                                AND e.subject = 'attempt' AND e.to_status = 'unknown'))::int
                AS timeouts,
              count(*) FILTER (WHERE a.status = 'unknown')::int AS unknown_now,
              count(*) FILTER (WHERE a.status = 'cancelled')::int AS cancelled,
              count(*) FILTER (WHERE a.outcome = 'discarded')::int AS discarded,
              (percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM a.finished_at - a.started_at) * 1000)
                 FILTER (WHERE a.status IN ('succeeded', 'failed') AND a.claimed_at IS NOT NULL))::float8 AS p95_ms
         FROM attempts a
        WHERE a.started_at >= now() - make_interval(mins => $1::int)
        GROUP BY a.provider ORDER BY a.provider`,
);
