import { prepared } from '../database/prepared-statements.js';

/** The API keys' hot statements (docs/sql/api-keys.sql). */

// Every request without a cached key runs these (database/prepared-statements.ts).
export const ACTIVE_BY_HASH = prepared(
  'active_api_key_by_hash',
  `SELECT id, owner_id, scopes, expires_at FROM api_keys
  WHERE key_hash = $1 AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())`,
);
export const TOUCH = prepared(
  'touch_api_key',
  `UPDATE api_keys SET last_used_at = now()
  WHERE id = $1 AND (last_used_at IS NULL OR last_used_at < now() - interval '1 minute')`,
);
