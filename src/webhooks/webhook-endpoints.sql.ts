import { statement } from '../database/prepared-statements.js';

/** The webhook endpoints' statements (docs/sql/webhook-endpoints.sql). */

const COLUMNS = 'id, owner_id, url, events, status, disabled_reason, disabled_at, created_at';

export const LOCK_OWNER_ENDPOINTS = statement(
  'lock_owner_webhook_endpoints',
  `SELECT pg_advisory_xact_lock(hashtextextended('onejob.webhook_endpoints:' || $1, 0))`,
);

export const INSERT_WITHIN_LIMIT = statement(
  'insert_webhook_endpoint_within_limit',
  `INSERT INTO webhook_endpoints (owner_id, url, events, secret)
       SELECT $1, $2, $3, $4 WHERE (SELECT count(*) FROM webhook_endpoints WHERE owner_id = $1) < $5
       RETURNING ${COLUMNS}`,
);

export const LIST_OWNED = statement(
  'list_owned_webhook_endpoints',
  `SELECT ${COLUMNS} FROM webhook_endpoints WHERE owner_id = $1 ORDER BY created_at, id`,
);

export const FIND_OWNED = statement(
  'find_owned_webhook_endpoint',
  `SELECT ${COLUMNS} FROM webhook_endpoints WHERE owner_id = $1 AND id = $2`,
);

export const DELETE_OWNED = statement(
  'delete_owned_webhook_endpoint',
  `DELETE FROM webhook_endpoints WHERE owner_id = $1 AND id = $2 RETURNING id`,
);

export const ROTATE_SECRET = statement(
  'rotate_webhook_secret',
  `WITH live AS (
         SELECT w.id, COALESCE((SELECT jsonb_agg(p ORDER BY (p->>'expiresAt')::timestamptz)
           FROM jsonb_array_elements(w.previous_secrets) p
                                 WHERE (p->>'expiresAt')::timestamptz > now()), '[]'::jsonb) AS retired
           FROM webhook_endpoints w WHERE w.owner_id = $1 AND w.id = $2
          FOR UPDATE
       ), rotated AS (
         UPDATE webhook_endpoints w
            SET previous_secrets = live.retired || jsonb_build_array(jsonb_build_object(
                  'secret', w.secret, 'expiresAt', now() + $4 * interval '1 millisecond')),
                secret = $3, updated_at = now()
           FROM live WHERE w.id = live.id AND jsonb_array_length(live.retired) < $5
         RETURNING w.id, now() + $4 * interval '1 millisecond' AS expires_at
       )
       -- The endpoint's view columns are not changed by a rotation: the statement's snapshot of them is current.
       SELECT ${COLUMNS.split(', ')
         .map((c) => `w.${c}`)
         .join(', ')}, r.expires_at AS previous_secret_expires_at
         FROM live JOIN webhook_endpoints w ON w.id = live.id LEFT JOIN rotated r ON r.id = live.id`,
);

export const ENABLE_OWNED = statement(
  'enable_owned_webhook_endpoint',
  `UPDATE webhook_endpoints SET status = 'enabled', disabled_reason = NULL, disabled_at = NULL,
        failing_since = NULL,
              failed_events = 0, updated_at = now()
        WHERE owner_id = $1 AND id = $2
        RETURNING ${COLUMNS}`,
);
