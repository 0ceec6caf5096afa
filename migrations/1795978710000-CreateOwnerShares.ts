import type { MigrationInterface, QueryRunner } from 'typeorm';

const SCOPES_BEFORE = `'jobs:write', 'jobs:read', 'attempts:resolve', 'providers:certify', 'ops:read', 'budgets:write'`;
const SCOPES_AFTER = `${SCOPES_BEFORE}, 'owners:write'`;

/**
 * Fair share between owners (docs/design.md#fair-share):
 * - `owner_shares`: an owner's weight and cap, set by admins (`owners:write`), and its `pass`, the stride
 *   scheduler's count of the slots it was given (in slots per unit of weight), advanced by the claims that serve
 *   more than one owner. An owner without a row has weight 1, no cap and the lowest pass it may have.
 * - `owner_share_changes`: who changed an owner's weight or cap, when, to what.
 * - Per owner, its due jobs in claim order: the claim finds the owners with due work by a loose scan of these
 *   indexes and takes each one's highest priority, then oldest, jobs in a LATERAL, reading no other owner's rows.
 * - The `owners:write` scope, given to keys that had every scope before (the demo key).
 */
export class CreateOwnerShares1795978710000 implements MigrationInterface {
  name = 'CreateOwnerShares1795978710000';

  async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`
      CREATE TABLE owner_shares (
        owner_id text PRIMARY KEY,
        weight smallint NOT NULL DEFAULT 1,
        max_concurrency integer,
        pass float8 NOT NULL DEFAULT 0,
        updated_at timestamptz NOT NULL DEFAULT now(),
        CONSTRAINT "CHK_owner_shares_weight" CHECK (weight BETWEEN 1 AND 100),
        CONSTRAINT "CHK_owner_shares_max_concurrency" CHECK (max_concurrency IS NULL OR max_concurrency >= 0)
      )`);
    await queryRunner.query(`
      CREATE TABLE owner_share_changes (
        id bigserial PRIMARY KEY,
        owner_id text NOT NULL,
        weight smallint NOT NULL,
        max_concurrency integer,
        actor_key_id uuid,
        actor_owner text NOT NULL,
        at timestamptz NOT NULL DEFAULT now()
      )`);
    await queryRunner.query(`CREATE INDEX "IDX_owner_share_changes_owner" ON owner_share_changes (owner_id, id DESC)`);
    await queryRunner.query(
      `CREATE INDEX "IDX_jobs_due_owner" ON jobs (owner_id, priority DESC, next_attempt_at)
        WHERE next_attempt_at IS NOT NULL AND waiting_for IS NULL`,
    );
    await queryRunner.query(
      `CREATE INDEX "IDX_jobs_waiting_owner" ON jobs (waiting_for, owner_id, priority DESC, next_attempt_at)
        WHERE next_attempt_at IS NOT NULL AND waiting_for IS NOT NULL`,
    );
    await queryRunner.query(`ALTER TABLE api_keys DROP CONSTRAINT "CHK_api_keys_scopes"`);
    await queryRunner.query(
      `ALTER TABLE api_keys ADD CONSTRAINT "CHK_api_keys_scopes" CHECK (scopes <@ ARRAY[${SCOPES_AFTER}]::text[])`,
    );
    await queryRunner.query(
      `UPDATE api_keys SET scopes = scopes || 'owners:write'::text WHERE scopes @> ARRAY[${SCOPES_BEFORE}]::text[]`,
    );
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`UPDATE api_keys SET scopes = array_remove(scopes, 'owners:write')`);
    await queryRunner.query(`ALTER TABLE api_keys DROP CONSTRAINT "CHK_api_keys_scopes"`);
    await queryRunner.query(
      `ALTER TABLE api_keys ADD CONSTRAINT "CHK_api_keys_scopes" CHECK (scopes <@ ARRAY[${SCOPES_BEFORE}]::text[])`,
    );
    await queryRunner.query(`DROP INDEX "IDX_jobs_waiting_owner"`);
    await queryRunner.query(`DROP INDEX "IDX_jobs_due_owner"`);
    await queryRunner.query(`DROP TABLE owner_share_changes`);
    await queryRunner.query(`DROP TABLE owner_shares`);
  }
}
