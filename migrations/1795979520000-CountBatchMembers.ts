import type { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * A batch's member count on its own row (docs/design.md#live-streams): the jobs its items name (created or
 * replayed; a conflict names none). Its stream's ids were counted by joining the members' jobs, and the retention
 * purge deletes jobs, so ids went down once finished members were purged: a client holding a higher id never got
 * `batch.completed`. With `members` and `live_jobs` (which the settlement trigger takes down) the ids are read
 * from the row alone: terminal members are `members - live_jobs`, which only grows, purge or not.
 */
export class CountBatchMembers1795979520000 implements MigrationInterface {
  name = 'CountBatchMembers1795979520000';

  async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`ALTER TABLE batches ADD COLUMN members integer`);
    // Items outlive the purge (only jobs go), so they still say how many members each batch has.
    await queryRunner.query(`
      UPDATE batches b SET members = (SELECT count(*) FROM batch_items i WHERE i.batch_id = b.id AND i.job_id IS NOT NULL)`);
    await queryRunner.query(`ALTER TABLE batches ALTER COLUMN members SET NOT NULL`);
    await queryRunner.query(`ALTER TABLE batches ADD CONSTRAINT "CHK_batches_members"
      CHECK (members BETWEEN live_jobs AND item_count)`);
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`ALTER TABLE batches DROP CONSTRAINT "CHK_batches_members"`);
    await queryRunner.query(`ALTER TABLE batches DROP COLUMN members`);
  }
}
