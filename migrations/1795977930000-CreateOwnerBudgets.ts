import type { MigrationInterface, QueryRunner } from 'typeorm';

/** An owner's optional monthly spending limit (docs/operations.md#cost): past it, new jobs are refused with 429. */
export class CreateOwnerBudgets1795977930000 implements MigrationInterface {
  name = 'CreateOwnerBudgets1795977930000';

  async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`
      CREATE TABLE owner_budgets (
        owner_id text PRIMARY KEY,
        monthly_limit numeric(18, 8) NOT NULL,
        currency character(3) NOT NULL,
        updated_at timestamptz NOT NULL DEFAULT now(),
        CONSTRAINT "CHK_owner_budgets_limit" CHECK (monthly_limit >= 0)
      )`);
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`DROP TABLE owner_budgets`);
  }
}
