import type { MigrationInterface, QueryRunner } from 'typeorm';

const SCOPES_BEFORE = `'jobs:write', 'jobs:read', 'attempts:resolve', 'providers:certify'`;
const SCOPES_AFTER = `${SCOPES_BEFORE}, 'ops:read'`;

/**
 * The operator surface (docs/operations.md#runbook-unknown-attempts): the `ops:read` scope, key expiry and last use,
 * the acting key on job_events, and the indexes the cross-owner reads need. The time-range reads of the console's
 * chart use BRIN indexes: nearly free to maintain on these append-mostly tables, and the recent, not yet summarised
 * ranges they care about are always scanned.
 */
export class OperatorSurface1795977800000 implements MigrationInterface {
  name = 'OperatorSurface1795977800000';

  async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`ALTER TABLE api_keys DROP CONSTRAINT "CHK_api_keys_scopes"`);
    await queryRunner.query(
      `ALTER TABLE api_keys ADD CONSTRAINT "CHK_api_keys_scopes" CHECK (scopes <@ ARRAY[${SCOPES_AFTER}]::text[])`,
    );
    await queryRunner.query(
      `ALTER TABLE api_keys ADD COLUMN expires_at timestamptz, ADD COLUMN last_used_at timestamptz`,
    );
    await queryRunner.query(`ALTER TABLE job_events ADD COLUMN actor_key_id uuid, ADD COLUMN actor_owner text`);
    await queryRunner.query(`CREATE INDEX "IDX_jobs_created" ON jobs (created_at DESC, id DESC)`);
    await queryRunner.query(`CREATE INDEX "IDX_jobs_completed_brin" ON jobs USING brin (completed_at)`);
    await queryRunner.query(`CREATE INDEX "IDX_attempts_started_brin" ON attempts USING brin (started_at)`);
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`DROP INDEX "IDX_attempts_started_brin"`);
    await queryRunner.query(`DROP INDEX "IDX_jobs_completed_brin"`);
    await queryRunner.query(`DROP INDEX "IDX_jobs_created"`);
    await queryRunner.query(`ALTER TABLE job_events DROP COLUMN actor_owner, DROP COLUMN actor_key_id`);
    await queryRunner.query(`ALTER TABLE api_keys DROP COLUMN last_used_at, DROP COLUMN expires_at`);
    await queryRunner.query(`UPDATE api_keys SET scopes = array_remove(scopes, 'ops:read')`);
    await queryRunner.query(`ALTER TABLE api_keys DROP CONSTRAINT "CHK_api_keys_scopes"`);
    await queryRunner.query(
      `ALTER TABLE api_keys ADD CONSTRAINT "CHK_api_keys_scopes" CHECK (scopes <@ ARRAY[${SCOPES_BEFORE}]::text[])`,
    );
  }
}
