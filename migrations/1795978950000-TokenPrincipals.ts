import type { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * Principals beyond API keys (docs/operations.md#tokens-from-your-identity-provider):
 * - the audit records that name who acted (`job_events` for an operator's resolve, `owner_share_changes`) record a
 *   JWT's subject and issuer where a key records its id;
 * - `stream_tokens`: short-lived tokens that open one stream each (`?access_token=`), stored as SHA-256 hashes like
 *   keys. `key_id` is the key a token was made with: revoking the key ends its stream tokens too.
 */
export class TokenPrincipals1795978950000 implements MigrationInterface {
  name = 'TokenPrincipals1795978950000';

  async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`ALTER TABLE job_events ADD COLUMN actor_subject text, ADD COLUMN actor_issuer text`);
    await queryRunner.query(`ALTER TABLE owner_share_changes ADD COLUMN actor_subject text,
      ADD COLUMN actor_issuer text,
      ADD CONSTRAINT "CHK_owner_share_changes_actor"
        CHECK (actor_key_id IS NOT NULL OR (actor_subject IS NOT NULL AND actor_issuer IS NOT NULL))`);
    await queryRunner.query(`
      CREATE TABLE stream_tokens (
        id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
        token_hash character(64) NOT NULL,
        owner_id text NOT NULL,
        scopes text[] NOT NULL,
        stream_kind text NOT NULL,
        stream_id uuid NOT NULL,
        key_id uuid REFERENCES api_keys (id) ON DELETE CASCADE,
        actor_subject text,
        actor_issuer text,
        expires_at timestamptz NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now(),
        CONSTRAINT "UQ_stream_tokens_token_hash" UNIQUE (token_hash),
        CONSTRAINT "CHK_stream_tokens_stream_kind" CHECK (stream_kind IN ('job', 'batch')),
        CONSTRAINT "CHK_stream_tokens_scopes" CHECK (scopes <@ ARRAY['jobs:read', 'ops:read']::text[])
      )`);
    await queryRunner.query(`CREATE INDEX "IDX_stream_tokens_expires_at" ON stream_tokens (expires_at)`);
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`DROP TABLE stream_tokens`);
    await queryRunner.query(`ALTER TABLE owner_share_changes DROP CONSTRAINT "CHK_owner_share_changes_actor",
      DROP COLUMN actor_issuer, DROP COLUMN actor_subject`);
    await queryRunner.query(`ALTER TABLE job_events DROP COLUMN actor_issuer, DROP COLUMN actor_subject`);
  }
}
