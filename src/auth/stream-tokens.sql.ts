import { prepared, statement } from '../database/prepared-statements.js';

/** The stream tokens' statements (docs/sql/stream-tokens.sql). */

/**
 * A new token, and up to 100 tokens expired over an hour ago deleted by the same statement: the table holds about
 * the last STREAM_TOKEN_TTL_SECONDS of tokens without a sweeper of its own.
 */
export const INSERT_STREAM_TOKEN = statement<
  [string, string, string[], string, string, string | null, string | null, string | null, Date],
  { expires_at: Date }
>(
  'insert_stream_token',
  `WITH gone AS (
    DELETE FROM stream_tokens WHERE id IN (
      SELECT id FROM stream_tokens WHERE expires_at < now() - interval '1 hour' ORDER BY expires_at LIMIT 100
    )
  )
  INSERT INTO stream_tokens (token_hash, owner_id, scopes, stream_kind, stream_id, key_id, actor_subject, actor_issuer,
    expires_at)
  VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING expires_at`,
);

/** A token by its hash, with what refuses it: its own expiry, its key's revocation or expiry. */
export const STREAM_TOKEN_BY_HASH = prepared<
  [string],
  {
    owner_id: string;
    scopes: string[];
    stream_kind: 'job' | 'batch';
    stream_id: string;
    key_id: string | null;
    actor_subject: string | null;
    actor_issuer: string | null;
    expires_at: Date;
    expired: boolean;
    key_revoked: boolean;
    key_expired: boolean;
  }
>(
  'stream_token_by_hash',
  `SELECT t.owner_id, t.scopes, t.stream_kind, t.stream_id, t.key_id, t.actor_subject, t.actor_issuer, t.expires_at,
    t.expires_at <= now() AS expired, COALESCE(k.revoked_at IS NOT NULL, false) AS key_revoked,
    COALESCE(k.expires_at <= now(), false) AS key_expired
  FROM stream_tokens t LEFT JOIN api_keys k ON k.id = t.key_id
  WHERE t.token_hash = $1`,
);
