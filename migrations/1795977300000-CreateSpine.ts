import type { MigrationInterface, QueryRunner } from 'typeorm';

/** api_keys, jobs (one per owner and idempotency key) and the append-only job_events audit trail. */
export class CreateSpine1795977300000 implements MigrationInterface {
  name = 'CreateSpine1795977300000';

  async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`
      CREATE TABLE api_keys (
        id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
        owner_id text NOT NULL,
        key_hash character(64) NOT NULL,
        scopes text[] NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now(),
        revoked_at timestamptz,
        CONSTRAINT "UQ_api_keys_key_hash" UNIQUE (key_hash),
        CONSTRAINT "CHK_api_keys_owner_id" CHECK (length(owner_id) BETWEEN 1 AND 200),
        CONSTRAINT "CHK_api_keys_scopes" CHECK (scopes <@ ARRAY['jobs:write', 'jobs:read', 'attempts:resolve', 'providers:certify']::text[])
      )`);
    await queryRunner.query(`
      CREATE TABLE jobs (
        id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
        owner_id text NOT NULL,
        idempotency_key character varying(255) NOT NULL,
        fingerprint character(64) NOT NULL,
        operation text NOT NULL,
        input jsonb NOT NULL,
        providers text[] NOT NULL,
        status text NOT NULL DEFAULT 'pending',
        version integer NOT NULL DEFAULT 0,
        result jsonb,
        error jsonb,
        completed_by uuid,
        created_at timestamptz NOT NULL DEFAULT now(),
        updated_at timestamptz NOT NULL DEFAULT now(),
        completed_at timestamptz,
        CONSTRAINT "UQ_jobs_owner_idempotency_key" UNIQUE (owner_id, idempotency_key),
        CONSTRAINT "CHK_jobs_status" CHECK (status IN ('pending', 'running', 'unknown', 'succeeded', 'failed', 'cancelled')),
        CONSTRAINT "CHK_jobs_completed_at" CHECK ((status IN ('succeeded', 'failed', 'cancelled')) = (completed_at IS NOT NULL)),
        CONSTRAINT "CHK_jobs_succeeded_has_winner" CHECK (status <> 'succeeded' OR (completed_by IS NOT NULL AND result IS NOT NULL)),
        CONSTRAINT "CHK_jobs_version" CHECK (version >= 0)
      )`);
    await queryRunner.query(`CREATE INDEX "IDX_jobs_owner_created" ON jobs (owner_id, created_at DESC, id DESC)`);
    await queryRunner.query(
      `CREATE INDEX "IDX_jobs_owner_status_created" ON jobs (owner_id, status, created_at DESC, id DESC)`,
    );
    await queryRunner.query(`
      CREATE TABLE job_events (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        job_id uuid NOT NULL,
        attempt_id uuid,
        subject text NOT NULL,
        from_status text,
        to_status text NOT NULL,
        reason text NOT NULL,
        detail jsonb,
        at timestamptz NOT NULL DEFAULT clock_timestamp(),
        CONSTRAINT "FK_job_events_job" FOREIGN KEY (job_id) REFERENCES jobs (id),
        CONSTRAINT "CHK_job_events_subject" CHECK (subject IN ('job', 'attempt'))
      )`);
    await queryRunner.query(`CREATE INDEX "IDX_job_events_job" ON job_events (job_id, id)`);
    await queryRunner.query(`
      CREATE FUNCTION job_events_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        RAISE EXCEPTION 'job_events is append-only' USING ERRCODE = 'insufficient_privilege';
      END $$`);
    await queryRunner.query(`
      CREATE TRIGGER "TRG_job_events_append_only" BEFORE UPDATE OR DELETE ON job_events
      FOR EACH ROW EXECUTE FUNCTION job_events_append_only()`);
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`DROP TABLE job_events`);
    await queryRunner.query(`DROP FUNCTION job_events_append_only()`);
    await queryRunner.query(`DROP TABLE jobs`);
    await queryRunner.query(`DROP TABLE api_keys`);
  }
}
