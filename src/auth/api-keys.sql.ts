import { prepared, statement } from '../database/prepared-statements.js';

/** The API keys' statements (docs/sql/api-keys.sql). */

/** Revocations are announced here, in the revoking transaction. */
export const API_KEYS_CHANNEL = 'onejob_api_keys';

// Every request without a cached key runs these (database/prepared-statements.ts).
// A revoked or expired key is found too: each is refused with a code of its own (key_revoked, token_expired).
export const KEY_BY_HASH = prepared(
  'api_key_by_hash',
  `SELECT id, owner_id, scopes, expires_at, revoked_at IS NOT NULL AS revoked,
    expires_at IS NOT NULL AND expires_at <= now() AS expired
  FROM api_keys WHERE key_hash = $1`,
);
export const TOUCH = prepared(
  'touch_api_key',
  `UPDATE api_keys SET last_used_at = now()
  WHERE id = $1 AND (last_used_at IS NULL OR last_used_at < now() - interval '1 minute')`,
);

/** Of these key ids, the ones still neither revoked nor expired (the open streams' recheck). */
export const STILL_ACTIVE = statement<[string[]], { id: string }>(
  'api_keys_still_active',
  `SELECT id FROM api_keys
  WHERE id = ANY($1::uuid[]) AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())`,
);

export const INSERT_KEY = statement<[string, string, string[], Date | null], { id: string }>(
  'insert_api_key',
  'INSERT INTO api_keys (owner_id, key_hash, scopes, expires_at) VALUES ($1, $2, $3, $4) RETURNING id',
);

export const LIST_KEYS = statement(
  'list_api_keys',
  `SELECT id, owner_id, scopes, created_at, expires_at, last_used_at, revoked_at FROM api_keys
        ORDER BY owner_id, created_at, id`,
);

/** Revokes once (the first revocation's time stays); the NOTIFY at commit drops the key from every replica's cache. */
export const REVOKE_KEY = statement(
  'revoke_api_key',
  `WITH r AS (
         UPDATE api_keys SET revoked_at = COALESCE(revoked_at, now()) WHERE id = $1
         RETURNING id, owner_id, scopes, created_at, expires_at, last_used_at, revoked_at
       )
       SELECT r.*, pg_notify('${API_KEYS_CHANNEL}', r.id::text) FROM r`,
);

/** Two bootstraps started together (two replicas, a retried Job) queue here and create one first key between them. */
export const LOCK_KEYS = statement('lock_api_keys', 'LOCK TABLE api_keys IN SHARE ROW EXCLUSIVE MODE');

export const INSERT_FIRST_KEY = statement<[string, string, string[]], { id: string }>(
  'insert_first_api_key',
  `INSERT INTO api_keys (owner_id, key_hash, scopes) SELECT $1, $2, $3
          WHERE NOT EXISTS (SELECT 1 FROM api_keys) RETURNING id`,
);

export const COUNT_KEYS = statement<[], { n: number }>('count_api_keys', 'SELECT count(*)::int AS n FROM api_keys');
