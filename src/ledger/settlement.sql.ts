import { prepared, statement } from '../database/prepared-statements.js';
import { announcementSql } from './announcement.js';

/**
 * Settlement's statements (docs/sql/settlement.sql): the compare-and-swap of I5. The ledger's alone: nothing outside
 * src/ledger/ imports this module (eslint.config.mjs, src/ledger/only-writer.spec.ts).
 */

/**
 * A batch of results' settlement in one statement (see settleResults); named, as the hot statements are
 * (database/prepared-statements.ts).
 */
export const SETTLE_RESULTS = prepared(
  'settle_results',
  `WITH p AS MATERIALIZED (
         SELECT * FROM jsonb_to_recordset($1::jsonb)
                    AS p(job_id uuid, attempt_id uuid, value jsonb, usage jsonb, provider_request_id text,
                      result_digest text,
                          resolved_by text, provider_status text)
       ), j AS MATERIALIZED (
         SELECT id, status, version, completed_by FROM jobs WHERE id IN (SELECT job_id FROM p) ORDER BY id FOR UPDATE
       ), a AS MATERIALIZED (
         SELECT x.id, x.job_id, x.status, x.outcome, x.job_version, x.provider FROM attempts x
          WHERE x.id IN (SELECT attempt_id FROM p) AND x.job_id = ANY ((SELECT array_agg(id) FROM j)::uuid[])
          ORDER BY x.id FOR UPDATE
       ), won AS (
         UPDATE jobs t SET status = 'succeeded', result = p.value, completed_by = a.id, version = t.version + 1,
                completed_at = now(), updated_at = now(), next_attempt_at = NULL
           FROM a JOIN p ON p.attempt_id = a.id
          WHERE t.id = a.job_id AND t.completed_by IS NULL AND t.version = a.job_version
            AND a.outcome IS NULL AND a.status = ANY($2::text[])
          RETURNING t.id, t.version, t.owner_id, t.operation, t.idempotency_key, t.completed_at, t.completed_by,
            t.result
       ), outbox AS (
         -- The transactional outbox (docs/operations.md#webhooks): the owner's subscribed endpoints get the
         -- announcement in this same statement, so a committed win is always announced and a loss never is.
         INSERT INTO webhook_deliveries (endpoint_id, owner_id, job_id, event_type, payload)
         SELECT w.id, won.owner_id, won.id, 'job.succeeded',
                ${announcementSql('won', {
                  type: "'job.succeeded'",
                  attemptId: 'NULL',
                  status: "'succeeded'",
                  error: 'NULL',
                })}
           FROM won JOIN webhook_endpoints w ON w.owner_id = won.owner_id AND w.status = 'enabled'
             AND 'job.succeeded' = ANY (w.events)
          RETURNING job_id
       ), att AS (
         UPDATE attempts x SET status = CASE WHEN a.status = ANY($2::text[]) THEN 'succeeded' ELSE x.status END,
                outcome = CASE WHEN won.id IS NOT NULL THEN 'won' ELSE 'discarded' END,
                usage = p.usage, provider_request_id = COALESCE(p.provider_request_id, x.provider_request_id),
                result_digest = p.result_digest, finished_at = COALESCE(x.finished_at, now()),
                resolved_by = CASE WHEN a.status = 'unknown' THEN p.resolved_by ELSE x.resolved_by END,
                provider_status = COALESCE(p.provider_status, x.provider_status)
           FROM a JOIN p ON p.attempt_id = a.id LEFT JOIN won ON won.completed_by = a.id
          WHERE x.id = a.id AND a.outcome IS NULL
          RETURNING x.id, x.status, x.outcome
       ), ev AS (
         INSERT INTO job_events (job_id, attempt_id, subject, from_status, to_status, reason, detail)
         SELECT a.job_id, a.id, 'attempt', a.status, att.status,
                CASE WHEN att.outcome = 'won' THEN 'result_won' ELSE 'result_discarded' END,
                CASE WHEN att.outcome = 'won' THEN NULL
                     ELSE jsonb_build_object('resultDigest', p.result_digest, 'readVersion', a.job_version,
                       'jobVersion', j.version,
                                             'winner', j.completed_by, 'jobStatus', j.status) END
           FROM att JOIN a ON a.id = att.id JOIN p ON p.attempt_id = a.id JOIN j ON j.id = a.job_id
         UNION ALL
         SELECT won.id, NULL, 'job', j.status, 'succeeded', 'result_won', jsonb_build_object('attemptId',
           won.completed_by, 'version', won.version)
           FROM won JOIN j ON j.id = won.id
       )
       SELECT a.id AS attempt_id, won.version, (SELECT count(*)::int FROM outbox o WHERE o.job_id = a.job_id)
         AS announced,
              a.status AS attempt_from, att.status AS attempt_to, a.outcome AS prior_outcome, a.provider,
              j.status AS job_from, j.version AS job_version, a.job_version AS read_version, j.completed_by AS winner
         FROM a JOIN j ON j.id = a.job_id LEFT JOIN att ON att.id = a.id LEFT JOIN won ON won.completed_by = a.id`,
);

/** A final failure: the compare-and-swap on the version read (I5). */
export const FAIL_IF_VERSION = statement<[id: string, readVersion: number, error: string], { version: number }>(
  'fail_if_version',
  `UPDATE jobs SET status = 'failed', error = $3::jsonb, version = version + 1, completed_at = now(),
    updated_at = now(),
       next_attempt_at = NULL
 WHERE id = $1 AND version = $2 AND completed_by IS NULL
 RETURNING version`,
);

/** The fence: a cancel bumps the version, so every in-flight result loses its compare-and-swap. */
export const CANCEL_IF_LIVE = statement<[id: string], { version: number }>(
  'cancel_if_live',
  `UPDATE jobs SET status = 'cancelled', version = version + 1, next_attempt_at = NULL, completed_at = now(),
       updated_at = now(), error = jsonb_build_object('reason', 'cancelled', 'message', 'The owner cancelled the job.')
 WHERE id = $1 AND status IN ('pending', 'running', 'unknown')
 RETURNING version`,
);
