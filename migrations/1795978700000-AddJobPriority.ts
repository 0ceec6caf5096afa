import type { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * A job's `priority` (docs/design.md#fair-share): higher first among one owner's due jobs, never ahead of another
 * owner's share. Not part of the fingerprint. Adding a NOT NULL column with a constant default rewrites nothing.
 */
export class AddJobPriority1795978700000 implements MigrationInterface {
  name = 'AddJobPriority1795978700000';

  async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(
      `ALTER TABLE jobs ADD COLUMN priority smallint NOT NULL DEFAULT 0,
         ADD CONSTRAINT "CHK_jobs_priority" CHECK (priority BETWEEN -1000 AND 1000)`,
    );
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`ALTER TABLE jobs DROP COLUMN priority`);
  }
}
