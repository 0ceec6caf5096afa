import type { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * The foreign key FK_jobs_completed_by (jobs.completed_by → attempts.id) had no index on its referencing side, so
 * every attempt the retention purge deletes was checked by a sequential scan of jobs: a batch of 500 read the whole
 * table 500 times, and at 10 million jobs the purge could not finish (docs/benchmarks.md#history). Partial: only
 * settled jobs have a winner. A settlement already rewrites every index of its job (its status changes), so this
 * adds one entry to that write.
 */
export class IndexJobsCompletedBy1795979300000 implements MigrationInterface {
  name = 'IndexJobsCompletedBy1795979300000';

  async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(
      `CREATE INDEX "IDX_jobs_completed_by" ON jobs (completed_by) WHERE completed_by IS NOT NULL`,
    );
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`DROP INDEX "IDX_jobs_completed_by"`);
  }
}
