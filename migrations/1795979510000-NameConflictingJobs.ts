import type { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * A batch item in conflict names the job its key is bound to (docs/design.md#batches), as its answer and its
 * replays say. Beside `job_id`, not in it: `job_id` is membership, which the progress, the settlement trigger,
 * the announcement and the cancel all read, and a conflicting job is no member of the batch.
 */
export class NameConflictingJobs1795979510000 implements MigrationInterface {
  name = 'NameConflictingJobs1795979510000';

  async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`ALTER TABLE batch_items ADD COLUMN conflict_job_id uuid,
      ADD CONSTRAINT "CHK_batch_items_conflict_job" CHECK (conflict_job_id IS NULL OR outcome = 'conflict')`);
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(
      `ALTER TABLE batch_items DROP CONSTRAINT "CHK_batch_items_conflict_job", DROP COLUMN conflict_job_id`,
    );
  }
}
