import type { MigrationInterface, QueryRunner } from 'typeorm';

const SCOPES_BEFORE = `'jobs:write', 'jobs:read', 'attempts:resolve', 'providers:certify', 'ops:read'`;
const SCOPES_AFTER = `${SCOPES_BEFORE}, 'budgets:write'`;

/**
 * The `budgets:write` scope (docs/operations.md#api-keys): setting and removing a budget is an admin's act, no
 * longer any `jobs:write` key's. Keys that had every scope before (the demo key) get it too, so nothing they
 * could do is lost; other keys keep reading their owner's budget with `jobs:read`.
 */
export class AddBudgetsScope1795978310000 implements MigrationInterface {
  name = 'AddBudgetsScope1795978310000';

  async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`ALTER TABLE api_keys DROP CONSTRAINT "CHK_api_keys_scopes"`);
    await queryRunner.query(
      `ALTER TABLE api_keys ADD CONSTRAINT "CHK_api_keys_scopes" CHECK (scopes <@ ARRAY[${SCOPES_AFTER}]::text[])`,
    );
    await queryRunner.query(
      `UPDATE api_keys SET scopes = scopes || 'budgets:write'::text WHERE scopes @> ARRAY[${SCOPES_BEFORE}]::text[]`,
    );
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`UPDATE api_keys SET scopes = array_remove(scopes, 'budgets:write')`);
    await queryRunner.query(`ALTER TABLE api_keys DROP CONSTRAINT "CHK_api_keys_scopes"`);
    await queryRunner.query(
      `ALTER TABLE api_keys ADD CONSTRAINT "CHK_api_keys_scopes" CHECK (scopes <@ ARRAY[${SCOPES_BEFORE}]::text[])`,
    );
  }
}
