import type { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * What a job of an owner with a budget may still cost (docs/operations.md#budgets): its worst case, written by the
 * create under the owner's budget row lock and counted against the budget until the job settles, less what its
 * attempts have been priced at so far. Null for owners without a budget. The owner-and-status index already serves
 * the sum over an owner's live jobs.
 */
export class AddJobBudgetReservation1795978300000 implements MigrationInterface {
  name = 'AddJobBudgetReservation1795978300000';

  async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(
      `ALTER TABLE jobs ADD COLUMN reserved_cost numeric(18, 8), ADD COLUMN reserved_currency character(3)`,
    );
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`ALTER TABLE jobs DROP COLUMN reserved_currency, DROP COLUMN reserved_cost`);
  }
}
