import { statement } from '../database/prepared-statements.js';
import { announcementSql, isoTimeSql } from '../ledger/announcement.js';

/** The webhook outbox's and its delivery log's statements (docs/sql/webhook-deliveries.sql). */

const HISTORY = `(SELECT json_agg(json_build_object('number', a.number, 'statusCode', a.status_code, 'latencyMs',
  a.latency_ms,
  'error', a.error, 'at', a.at) ORDER BY a.id) FROM webhook_delivery_attempts a WHERE a.delivery_id = d.id) AS history`;
const COLUMNS = `d.id, d.endpoint_id, d.job_id, d.batch_id, d.event_type, d.status, d.attempts, d.next_attempt_at,
  d.last_status_code,
  d.last_error, d.created_at, d.delivered_at, ${HISTORY}`;

export const ENQUEUE = statement(
  'enqueue_webhook_deliveries',
  `INSERT INTO webhook_deliveries (endpoint_id, owner_id, job_id, event_type, payload)
       SELECT w.id, j.owner_id, j.id, e.type,
              ${announcementSql('j', {
                type: 'e.type',
                attemptId: 'e.attempt_id',
                status: 'j.status',
                error: 'j.error',
              })}
         FROM unnest($1::uuid[], $2::uuid[], $3::text[]) AS e (job_id, attempt_id, type)
         JOIN jobs j ON j.id = e.job_id
         JOIN webhook_endpoints w ON w.owner_id = j.owner_id AND w.status = 'enabled' AND e.type = ANY (w.events)`,
);

export const ENQUEUE_DECERTIFIED = statement(
  'enqueue_decertified_deliveries',
  `INSERT INTO webhook_deliveries (endpoint_id, owner_id, job_id, event_type, payload)
       SELECT w.id, w.owner_id, NULL, 'provider.decertified',
              jsonb_build_object('type', 'provider.decertified', 'timestamp', ${isoTimeSql('now()')},
                'data', jsonb_build_object(
                'provider', $1::text, 'operation', $2::text, 'model', $3::text, 'contractDigest', $4::text,
                'reportId', $5::text,
                'passed', false, 'trigger', $6::text, 'cost', $7::jsonb, 'certifiedAt', $8::text))
         FROM webhook_endpoints w WHERE w.status = 'enabled' AND 'provider.decertified' = ANY (w.events)
       RETURNING id`,
);

export const CLAIM_DUE_DELIVERIES = statement(
  'claim_due_deliveries',
  `WITH busy AS (
         SELECT owner_id, count(*) AS n FROM webhook_deliveries
          WHERE leased_until IS NOT NULL AND leased_until > now() AND status = 'pending'
          GROUP BY owner_id
       ), ranked AS (
         SELECT d.id, d.next_attempt_at,
                COALESCE(b.n, 0) + row_number() OVER (PARTITION BY d.owner_id ORDER BY d.next_attempt_at, d.id) AS turn
           FROM webhook_deliveries d LEFT JOIN busy b ON b.owner_id = d.owner_id
          WHERE d.status = 'pending' AND d.next_attempt_at <= now()
            AND EXISTS (SELECT 1 FROM webhook_endpoints w WHERE w.id = d.endpoint_id AND w.status = 'enabled')
       ), due AS (
         SELECT d.id FROM webhook_deliveries d JOIN ranked r ON r.id = d.id
          WHERE d.status = 'pending' AND d.next_attempt_at <= now()
          ORDER BY r.turn, r.next_attempt_at, d.id
          LIMIT $1
          FOR UPDATE OF d SKIP LOCKED
       )
       UPDATE webhook_deliveries d SET attempts = d.attempts + 1,
         next_attempt_at = now() + $2 * interval '1 millisecond',
              leased_until = now() + $2 * interval '1 millisecond'
         FROM due, webhook_endpoints w
        WHERE d.id = due.id AND w.id = d.endpoint_id
       RETURNING d.id, d.endpoint_id, d.attempts, d.payload::text AS payload, w.url, w.secret,
                 (SELECT array_agg(p->>'secret' ORDER BY (p->>'expiresAt')::timestamptz)
                    FROM jsonb_array_elements(w.previous_secrets) p
                   WHERE (p->>'expiresAt')::timestamptz > now()) AS previous_secrets`,
);

export const RECORD_SUCCESS = statement(
  'record_delivery_success',
  `WITH d AS (
         UPDATE webhook_deliveries SET status = 'succeeded', delivered_at = now(), last_status_code = $3,
           last_error = NULL,
                leased_until = NULL
          WHERE id = $1 AND attempts = $2 AND status = 'pending'
          RETURNING endpoint_id
       ), a AS (
         INSERT INTO webhook_delivery_attempts (delivery_id, number, status_code, latency_ms)
         SELECT id, $2, $3, $4 FROM webhook_deliveries WHERE id = $1
       )
       UPDATE webhook_endpoints w SET failing_since = NULL, failed_events = 0
         FROM d WHERE w.id = d.endpoint_id AND (w.failing_since IS NOT NULL OR w.failed_events > 0)`,
);

export const RECORD_FAILURE = statement(
  'record_delivery_failure',
  `WITH d AS (
         UPDATE webhook_deliveries
            SET status = CASE WHEN $6::bigint IS NULL THEN 'failed' ELSE 'pending' END,
                next_attempt_at = now() + COALESCE($6::bigint, 0) * interval '1 millisecond',
                last_status_code = $3, last_error = $5, leased_until = NULL
          WHERE id = $1 AND attempts = $2 AND status = 'pending'
          RETURNING endpoint_id, status
       ), a AS (
         INSERT INTO webhook_delivery_attempts (delivery_id, number, status_code, latency_ms, error)
         SELECT id, $2, $3, $4, $5 FROM webhook_deliveries WHERE id = $1
       ), x AS (
         SELECT w.id, (d.status = 'failed')::int AS exhausted,
                w.status = 'enabled' AND w.failing_since < now() - $7 * interval '1 millisecond' AS too_long,
                w.status = 'enabled' AND w.failed_events + (d.status = 'failed')::int >= $8 AS too_many
           FROM d JOIN webhook_endpoints w ON w.id = d.endpoint_id
       )
       UPDATE webhook_endpoints w
          SET failing_since = COALESCE(w.failing_since, now()), failed_events = w.failed_events + x.exhausted,
              status = CASE WHEN x.too_long OR x.too_many THEN 'disabled' ELSE w.status END,
              disabled_at = CASE WHEN x.too_long OR x.too_many THEN now() ELSE w.disabled_at END,
              disabled_reason = CASE WHEN x.too_long THEN $9 WHEN x.too_many THEN $10 ELSE w.disabled_reason END,
              updated_at = now()
         FROM x WHERE w.id = x.id
       RETURNING x.too_long OR x.too_many AS disabled_now, w.disabled_reason`,
);

export const RELEASE = statement(
  'release_delivery',
  `WITH d AS (
         UPDATE webhook_deliveries SET next_attempt_at = now(), last_error = $5, leased_until = NULL
          WHERE id = $1 AND attempts = $2 AND status = 'pending'
       )
       INSERT INTO webhook_delivery_attempts (delivery_id, number, status_code, latency_ms, error)
       SELECT id, $2, $3, $4, $5 FROM webhook_deliveries WHERE id = $1`,
);

export const LIST_FOR_ENDPOINT = statement(
  'list_endpoint_deliveries',
  `SELECT ${COLUMNS} FROM webhook_deliveries d
        WHERE d.owner_id = $1 AND d.endpoint_id = $2 AND ($3::uuid IS NULL OR d.job_id = $3) AND ($4::text IS NULL
          OR d.status = $4)
        ORDER BY d.created_at DESC, d.id DESC
        LIMIT $5`,
);

export const RETRY_NOW = statement(
  'retry_delivery_now',
  `WITH u AS (
         UPDATE webhook_deliveries SET status = 'pending', next_attempt_at = now()
          WHERE owner_id = $1 AND endpoint_id = $2 AND id = $3
          RETURNING *
       )
       SELECT ${COLUMNS} FROM u d`,
);
