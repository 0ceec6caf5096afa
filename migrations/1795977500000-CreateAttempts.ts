import type { MigrationInterface, QueryRunner } from 'typeorm';

/** attempts under jobs, at most one live per job (I3), and the job's scheduling column for workers. */
export class CreateAttempts1795977500000 implements MigrationInterface {
  name = 'CreateAttempts1795977500000';

  async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`
      CREATE TABLE attempts (
        id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
        job_id uuid NOT NULL,
        number integer NOT NULL,
        provider text NOT NULL,
        status text NOT NULL DEFAULT 'starting',
        outcome text,
        job_version integer NOT NULL,
        deadline_at timestamptz NOT NULL,
        hard_deadline_at timestamptz NOT NULL,
        claimed_at timestamptz,
        worker_id text,
        provider_request_id text,
        usage jsonb,
        error jsonb,
        result_digest character(64),
        started_at timestamptz NOT NULL DEFAULT now(),
        finished_at timestamptz,
        CONSTRAINT "FK_attempts_job" FOREIGN KEY (job_id) REFERENCES jobs (id),
        CONSTRAINT "UQ_attempts_job_number" UNIQUE (job_id, number),
        CONSTRAINT "CHK_attempts_status" CHECK (status IN ('starting', 'running', 'succeeded', 'failed', 'unknown', 'cancelled')),
        CONSTRAINT "CHK_attempts_outcome" CHECK (outcome IS NULL OR (outcome IN ('won', 'discarded') AND status IN ('succeeded', 'failed', 'cancelled'))),
        CONSTRAINT "CHK_attempts_number" CHECK (number >= 1)
      )`);
    await queryRunner.query(
      `CREATE UNIQUE INDEX "UQ_attempts_one_live_per_job" ON attempts (job_id) WHERE status IN ('starting', 'running', 'unknown')`,
    );
    await queryRunner.query(
      `CREATE INDEX "IDX_attempts_live_deadline" ON attempts (deadline_at) WHERE status IN ('starting', 'running', 'unknown')`,
    );
    await queryRunner.query(`ALTER TABLE jobs ADD COLUMN next_attempt_at timestamptz DEFAULT now()`);
    await queryRunner.query(`CREATE INDEX "IDX_jobs_due" ON jobs (next_attempt_at) WHERE next_attempt_at IS NOT NULL`);
    await queryRunner.query(
      `ALTER TABLE jobs ADD CONSTRAINT "FK_jobs_completed_by" FOREIGN KEY (completed_by) REFERENCES attempts (id) DEFERRABLE INITIALLY DEFERRED`,
    );
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`ALTER TABLE jobs DROP CONSTRAINT "FK_jobs_completed_by"`);
    await queryRunner.query(`DROP INDEX "IDX_jobs_due"`);
    await queryRunner.query(`ALTER TABLE jobs DROP COLUMN next_attempt_at`);
    await queryRunner.query(`DROP TABLE attempts`);
  }
}
