import type { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * job_events stays append-only for everything but the retention purge (docs/operations.md#retention): a DELETE
 * passes only in a transaction that ran `SET LOCAL onejob.purge = 'on'`, which only RetentionRepository does.
 * UPDATE is refused always. The index lets the purge find old terminal jobs without scanning live ones.
 */
export class AllowRetentionPurge1795977910000 implements MigrationInterface {
  name = 'AllowRetentionPurge1795977910000';

  async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`
      CREATE OR REPLACE FUNCTION job_events_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF TG_OP = 'DELETE' AND current_setting('onejob.purge', true) = 'on' THEN
          RETURN OLD;
        END IF;
        RAISE EXCEPTION 'job_events is append-only' USING ERRCODE = 'insufficient_privilege';
      END $$`);
    await queryRunner.query(
      `CREATE INDEX "IDX_jobs_completed_at" ON jobs (completed_at) WHERE completed_at IS NOT NULL`,
    );
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`DROP INDEX "IDX_jobs_completed_at"`);
    await queryRunner.query(`
      CREATE OR REPLACE FUNCTION job_events_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        RAISE EXCEPTION 'job_events is append-only' USING ERRCODE = 'insufficient_privilege';
      END $$`);
  }
}
