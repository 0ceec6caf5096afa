import type { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * `webhook_deliveries.leased_until`: set when a dispatcher claims a delivery, cleared when its attempt is
 * recorded. The claim counts each owner's deliveries in flight from it to share the slots between owners
 * (docs/operations.md#webhooks); the partial index keeps that count to the few rows in flight.
 */
export class WebhookDeliveryLease1795978460000 implements MigrationInterface {
  name = 'WebhookDeliveryLease1795978460000';

  async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`ALTER TABLE webhook_deliveries ADD COLUMN leased_until timestamptz`);
    await queryRunner.query(
      `CREATE INDEX "IDX_webhook_deliveries_leased" ON webhook_deliveries (owner_id) WHERE leased_until IS NOT NULL`,
    );
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`DROP INDEX "IDX_webhook_deliveries_leased"`);
    await queryRunner.query(`ALTER TABLE webhook_deliveries DROP COLUMN leased_until`);
  }
}
