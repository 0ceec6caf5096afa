import type { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * Webhook endpoints per owner and the transactional outbox (docs/operations.md#webhooks): one delivery row per
 * (event, subscribed endpoint), written in the transaction of the settlement it announces, and one row per
 * delivery attempt. Deliveries belong to their job: the retention purge removes them with it.
 */
export class CreateWebhooks1795977900000 implements MigrationInterface {
  name = 'CreateWebhooks1795977900000';

  async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`
      CREATE TABLE webhook_endpoints (
        id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
        owner_id text NOT NULL,
        url text NOT NULL,
        events text[] NOT NULL,
        secret text NOT NULL,
        previous_secret text,
        previous_secret_expires_at timestamptz,
        status text NOT NULL DEFAULT 'enabled',
        disabled_reason text,
        disabled_at timestamptz,
        failing_since timestamptz,
        failed_events integer NOT NULL DEFAULT 0,
        created_at timestamptz NOT NULL DEFAULT now(),
        updated_at timestamptz NOT NULL DEFAULT now(),
        CONSTRAINT "CHK_webhook_endpoints_status" CHECK (status IN ('enabled', 'disabled')),
        CONSTRAINT "CHK_webhook_endpoints_events" CHECK (
          cardinality(events) >= 1 AND events <@ ARRAY['job.succeeded', 'job.failed', 'job.cancelled', 'attempt.unknown']::text[])
      )`);
    // The outbox INSERT ... SELECT looks endpoints up by owner on every settlement: an index-only miss when none.
    await queryRunner.query(
      `CREATE INDEX "IDX_webhook_endpoints_owner" ON webhook_endpoints (owner_id) WHERE status = 'enabled'`,
    );
    await queryRunner.query(`
      CREATE TABLE webhook_deliveries (
        id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
        endpoint_id uuid NOT NULL,
        owner_id text NOT NULL,
        job_id uuid NOT NULL,
        event_type text NOT NULL,
        payload jsonb NOT NULL,
        status text NOT NULL DEFAULT 'pending',
        attempts integer NOT NULL DEFAULT 0,
        next_attempt_at timestamptz NOT NULL DEFAULT now(),
        last_status_code integer,
        last_error text,
        created_at timestamptz NOT NULL DEFAULT now(),
        delivered_at timestamptz,
        CONSTRAINT "FK_webhook_deliveries_endpoint" FOREIGN KEY (endpoint_id) REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
        CONSTRAINT "FK_webhook_deliveries_job" FOREIGN KEY (job_id) REFERENCES jobs (id),
        CONSTRAINT "CHK_webhook_deliveries_status" CHECK (status IN ('pending', 'succeeded', 'failed')),
        CONSTRAINT "CHK_webhook_deliveries_attempts" CHECK (attempts >= 0)
      )`);
    await queryRunner.query(
      `CREATE INDEX "IDX_webhook_deliveries_due" ON webhook_deliveries (next_attempt_at) WHERE status = 'pending'`,
    );
    await queryRunner.query(
      `CREATE INDEX "IDX_webhook_deliveries_endpoint" ON webhook_deliveries (endpoint_id, created_at DESC, id DESC)`,
    );
    await queryRunner.query(`CREATE INDEX "IDX_webhook_deliveries_job" ON webhook_deliveries (job_id)`);
    await queryRunner.query(`
      CREATE TABLE webhook_delivery_attempts (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        delivery_id uuid NOT NULL,
        number integer NOT NULL,
        status_code integer,
        latency_ms integer NOT NULL,
        error text,
        at timestamptz NOT NULL DEFAULT now(),
        CONSTRAINT "FK_webhook_delivery_attempts_delivery" FOREIGN KEY (delivery_id) REFERENCES webhook_deliveries (id) ON DELETE CASCADE
      )`);
    await queryRunner.query(
      `CREATE INDEX "IDX_webhook_delivery_attempts_delivery" ON webhook_delivery_attempts (delivery_id, id)`,
    );
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`DROP TABLE webhook_delivery_attempts`);
    await queryRunner.query(`DROP TABLE webhook_deliveries`);
    await queryRunner.query(`DROP TABLE webhook_endpoints`);
  }
}
