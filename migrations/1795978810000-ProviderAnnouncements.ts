import type { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * Webhook deliveries that are about a provider, not a job (`provider.decertified`: docs/operations.md#webhooks):
 * neither `job_id` nor `batch_id` is set for them, and endpoints may subscribe to it. Every job announcement keeps
 * its job and every batch announcement its batch; the retention purge, which deletes deliveries by job, leaves these
 * to the endpoint's own history.
 */
export class ProviderAnnouncements1795978810000 implements MigrationInterface {
  name = 'ProviderAnnouncements1795978810000';

  async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`ALTER TABLE webhook_deliveries DROP CONSTRAINT "CHK_webhook_deliveries_subject",
      ADD CONSTRAINT "CHK_webhook_deliveries_subject" CHECK (job_id IS NULL OR batch_id IS NULL)`);
    await queryRunner.query(`ALTER TABLE webhook_endpoints DROP CONSTRAINT "CHK_webhook_endpoints_events",
      ADD CONSTRAINT "CHK_webhook_endpoints_events" CHECK (cardinality(events) >= 1 AND events <@ ARRAY['job.succeeded',
        'job.failed', 'job.cancelled', 'attempt.unknown', 'batch.completed', 'provider.decertified']::text[])`);
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`UPDATE webhook_endpoints SET events = array_remove(events, 'provider.decertified')`);
    await queryRunner.query(`DELETE FROM webhook_endpoints WHERE cardinality(events) = 0`);
    await queryRunner.query(`ALTER TABLE webhook_endpoints DROP CONSTRAINT "CHK_webhook_endpoints_events",
      ADD CONSTRAINT "CHK_webhook_endpoints_events" CHECK (cardinality(events) >= 1 AND events <@
        ARRAY['job.succeeded', 'job.failed', 'job.cancelled', 'attempt.unknown', 'batch.completed']::text[])`);
    await queryRunner.query(`DELETE FROM webhook_deliveries WHERE job_id IS NULL AND batch_id IS NULL`);
    await queryRunner.query(`ALTER TABLE webhook_deliveries DROP CONSTRAINT "CHK_webhook_deliveries_subject",
      ADD CONSTRAINT "CHK_webhook_deliveries_subject" CHECK ((job_id IS NULL) <> (batch_id IS NULL))`);
  }
}
