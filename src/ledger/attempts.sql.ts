import { prepared, statement } from '../database/prepared-statements.js';

/**
 * The attempts table's statements (docs/sql/attempts.sql). The write statements are the ledger's alone: nothing
 * outside src/ledger/ imports this module (eslint.config.mjs, src/ledger/only-writer.spec.ts).
 */

const interval = (param: string) => `make_interval(secs => ${param}::float8 / 1000)`;

/** An attempt's columns, named: a registered statement must not return `*` (database/prepared-statements.ts). */
export const ATTEMPT_COLUMNS = `id, job_id, number, provider, status, outcome, job_version, deadline_at,
  hard_deadline_at, claimed_at, worker_id,
  provider_request_id, provider_status, provider_checked_at, resolved_by, usage, error, result_digest, started_at,
    finished_at,
  cost, cost_currency`;

// The claim path's statements, named like the request path's (database/prepared-statements.ts): a claim's
// attempts, and the mark right before the calls.
export const INSERT_CLAIMED = prepared(
  'insert_claimed',
  `WITH p AS (
         SELECT * FROM unnest($1::uuid[], $2::text[], $3::int[], $4::float8[], $5::float8[], $6::text[], $7::text[])
                    AS p(job_id, provider, job_version, timeout_ms, hard_ms, worker_id, job_from)
       ), ins AS (
         INSERT INTO attempts (job_id, number, provider, job_version, deadline_at, hard_deadline_at, claimed_at,
           worker_id)
         SELECT p.job_id, COALESCE((SELECT max(number) FROM attempts x WHERE x.job_id = p.job_id), 0) + 1, p.provider,
           p.job_version,
                now() + ${interval('p.timeout_ms')}, now() + ${interval('p.hard_ms')}, now(), p.worker_id
           FROM p
         RETURNING *
       ), jb AS (
         UPDATE jobs j SET status = 'running', updated_at = now(), next_attempt_at = NULL,
           waiting_for = NULL FROM p WHERE j.id = p.job_id
       ), ev AS (
         INSERT INTO job_events (job_id, attempt_id, subject, from_status, to_status, reason, detail)
         SELECT ins.job_id, ins.id, 'attempt', NULL, 'starting', 'claimed', jsonb_build_object('provider', ins.provider,
           'number', ins.number) FROM ins
         UNION ALL
         SELECT p.job_id, NULL, 'job', p.job_from, 'running', 'attempt_started',
           NULL FROM p WHERE p.job_from <> 'running'
       )
       SELECT ${ATTEMPT_COLUMNS} FROM ins`,
);

// The jobs are share-locked first (id order, then the attempts: the one lock order): a job's events then commit in
// the order of their ids, which a live stream relies on (docs/design.md#live-streams). Two marks share the lock.
export const MARK_RUNNING = prepared(
  'mark_running',
  `WITH p AS (
         SELECT * FROM unnest($1::uuid[], $2::float8[], $3::float8[]) AS p(id, timeout_ms, hard_ms)
       ), jl AS MATERIALIZED (
         SELECT j.id FROM jobs j WHERE j.id IN (SELECT x.job_id FROM attempts x WHERE x.id IN (SELECT id FROM p))
          ORDER BY j.id FOR SHARE
       ), m AS (
         UPDATE attempts a SET status = 'running', started_at = now(),
                deadline_at = now() + ${interval('p.timeout_ms')}, hard_deadline_at = now() + ${interval('p.hard_ms')}
           FROM p WHERE a.id = p.id AND a.status = 'starting' AND a.hard_deadline_at > now()
            AND a.job_id = ANY ((SELECT array_agg(id) FROM jl)::uuid[])
         RETURNING a.*
       ), ev AS (
         INSERT INTO job_events (job_id, attempt_id, subject, from_status, to_status, reason)
         SELECT job_id, id, 'attempt', 'starting', 'running', 'provider_called' FROM m
       ), lease AS (
         -- A capped provider's lease must outlive the call, whose hard deadline counts from now.
         UPDATE provider_leases l SET expires_at = m.hard_deadline_at + ${interval('$4')} FROM m
           WHERE l.attempt_id = m.id
       )
       SELECT ${ATTEMPT_COLUMNS} FROM m`,
);

/**
 * After the answer to MARK_RUNNING was lost (AttemptRunner.begin): what that worker ($2) marked `running` already.
 * Only that worker marks them, and it has sent nothing yet. Off the hot path: MARK_RUNNING stays as it was.
 */
export const MARKED_BY_WORKER = statement(
  'marked_by_worker',
  `SELECT ${ATTEMPT_COLUMNS} FROM attempts
    WHERE id = ANY ($1::uuid[]) AND status = 'running' AND worker_id = $2 AND hard_deadline_at > now()`,
);

/**
 * A provider status never goes back from an end (completed, failed, cancelled, incomplete, expired, unknowable) to
 * queued or in_progress: a retrieve sent before a cancel may answer after it, and must not undo what the cancel said.
 */
const NEXT_PROVIDER_STATUS = (value: string) =>
  `CASE WHEN ${value}::text IS NULL OR (${value}::text IN ('queued', 'in_progress') AND provider_status IS NOT NULL
                 AND provider_status NOT IN ('queued', 'in_progress')) THEN provider_status ELSE ${value}::text END`;

export const INSERT_ATTEMPT = statement(
  'insert_attempt',
  `INSERT INTO attempts (job_id, number, provider, job_version, deadline_at, hard_deadline_at, claimed_at, worker_id)
         VALUES ($1, COALESCE((SELECT max(number) FROM attempts WHERE job_id = $1), 0) + 1, $2, $3,
                 now() + ${interval('$4')}, now() + ${interval('$5')},
                   CASE WHEN $6::text IS NULL THEN NULL ELSE now() END, $6)
         RETURNING *`,
);

export const CLAIM_QUEUED = statement(
  'claim_queued',
  `UPDATE attempts SET claimed_at = now(), worker_id = $2, started_at = now(),
              deadline_at = now() + ${interval('$3')}, hard_deadline_at = now() + ${interval('$4')}
        WHERE id = $1 AND status = 'starting' AND claimed_at IS NULL RETURNING *`,
);

export const LOCK_JOB_AND_ATTEMPT = statement(
  'lock_job_and_attempt',
  `WITH j AS MATERIALIZED (SELECT * FROM jobs WHERE id = $1 FOR UPDATE)
       SELECT row_to_json(j) AS job, row_to_json(a) AS attempt
         FROM j, LATERAL (SELECT * FROM attempts WHERE id = $2 AND job_id = j.id FOR UPDATE) a`,
);

export const UPDATE_ATTEMPT_STATUS = statement(
  'update_attempt_status',
  `UPDATE attempts SET status = $2,
              outcome = COALESCE($3, outcome), error = COALESCE($4::jsonb, error), usage = COALESCE($5::jsonb, usage),
              provider_request_id = COALESCE($6, provider_request_id), result_digest = COALESCE($7, result_digest),
              finished_at = CASE WHEN $8 THEN COALESCE(finished_at, now()) ELSE finished_at END,
              provider_status = ${NEXT_PROVIDER_STATUS('$9')}, resolved_by = COALESCE($10, resolved_by)
        WHERE id = $1 RETURNING *`,
);

export const RECORD_PROVIDER_REQUEST = statement(
  'record_provider_request',
  `UPDATE attempts SET provider_request_id = $2, provider_status = COALESCE(provider_status, 'queued') WHERE id = $1`,
);

export const NOTE_PROVIDER_STATUS = statement(
  'note_provider_status',
  `UPDATE attempts SET provider_status = ${NEXT_PROVIDER_STATUS('$2')} WHERE id = $1`,
);

/**
 * `cancel`: nobody waits for the request any more (given up by failover, an operator's `failed`, or its job
 * ended: the owner's cancel, the abandon), so it is cancelled at the provider rather than only read. An operator's
 * `cancelled` stops the waiting only: its request is still followed while the job is live, and may still win.
 */
export const CLAIM_LOOKUPS = statement(
  'claim_lookups',
  `WITH c AS (
         SELECT a.id, (j.status NOT IN ('pending', 'running', 'unknown') OR a.status = 'failed'
                       OR (a.status = 'cancelled' AND a.resolved_by IS DISTINCT FROM 'operator')) AS cancel
           FROM attempts a JOIN jobs j ON j.id = a.job_id
          WHERE a.provider = ANY($1::text[])
            AND ((a.status = 'unknown' AND j.status IN ('pending', 'running', 'unknown')
                  AND a.provider_status IS DISTINCT FROM 'expired' AND a.provider_status IS DISTINCT FROM 'unknowable')
                 OR (a.provider_status IN ('queued', 'in_progress') AND a.outcome IS NULL
                     AND (a.status = 'cancelled' OR (a.status = 'failed' AND a.resolved_by = 'operator')
                          OR (a.status IN ('running', 'unknown')
                              AND j.status IN ('succeeded', 'failed', 'cancelled')))))
            AND (a.provider_checked_at IS NULL OR a.provider_checked_at <= now() - ${interval('$2')})
          ORDER BY a.provider_checked_at NULLS FIRST, a.deadline_at
          LIMIT $3
          FOR UPDATE OF a SKIP LOCKED
       )
       UPDATE attempts a SET provider_checked_at = now() FROM c WHERE a.id = c.id RETURNING a.*, c.cancel`,
);

export const FIND_OVERDUE_ATTEMPTS = statement(
  'find_overdue_attempts',
  `SELECT id, job_id FROM attempts
        WHERE status IN ('starting', 'running') AND claimed_at IS NOT NULL AND deadline_at < now()
        ORDER BY deadline_at LIMIT $1`,
);

export const FIND_UNKNOWN_OF_LIVE_JOBS = statement(
  'find_unknown_of_live_jobs',
  `SELECT a.* FROM attempts a JOIN jobs j ON j.id = a.job_id
        WHERE a.status = 'unknown' AND a.provider = ANY($1::text[]) AND j.status IN ('pending', 'running', 'unknown')
        ORDER BY a.deadline_at LIMIT $2`,
);

export const FIND_ABANDONED_ATTEMPTS = statement(
  'find_abandoned_attempts',
  `SELECT a.id, a.job_id FROM attempts a JOIN jobs j ON j.id = a.job_id
        WHERE a.status = 'unknown' AND j.status IN ('succeeded', 'failed', 'cancelled') AND a.hard_deadline_at < now()
        LIMIT $1`,
);

export const COUNT_UNKNOWN_ATTEMPTS = statement(
  'count_unknown_attempts',
  `SELECT count(*)::int AS n FROM attempts WHERE status = 'unknown'`,
);

export const LIST_ATTEMPTS_OF_JOB = statement(
  'list_attempts_of_job',
  'SELECT * FROM attempts WHERE job_id = $1 ORDER BY number',
);

export const FIND_JOB_ID_OF_ATTEMPT = statement(
  'find_job_id_of_attempt',
  `SELECT a.job_id FROM attempts a JOIN jobs j ON j.id = a.job_id
  WHERE a.id = $1 AND ($2::text IS NULL OR j.owner_id = $2)`,
);

export const OPERATION_OF_JOB = statement('operation_of_job', 'SELECT operation FROM jobs WHERE id = $1');
