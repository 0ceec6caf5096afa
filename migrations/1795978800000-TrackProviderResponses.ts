import type { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * What the provider last said of an attempt's request, where it keeps one by id (OpenAI's Responses API in
 * background mode: docs/design.md#resolution-at-the-provider): `provider_status` (its status, or `expired` when
 * it no longer knows the id, or `unknowable` when the create call never returned one), `provider_checked_at`
 * (the reconciler's last look-up: at most one per attempt per reconcile period, across replicas), and
 * `resolved_by` (how an `unknown` attempt ended: by the provider's record, an operator, or the service's own
 * deadlines). The partial index keeps the reconciler's search to the requests still running at the provider.
 */
export class TrackProviderResponses1795978800000 implements MigrationInterface {
  name = 'TrackProviderResponses1795978800000';

  async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`ALTER TABLE attempts
      ADD COLUMN provider_status text,
      ADD COLUMN provider_checked_at timestamptz,
      ADD COLUMN resolved_by text,
      ADD CONSTRAINT "CHK_attempts_resolved_by" CHECK (resolved_by IN ('provider', 'operator', 'deadline'))`);
    await queryRunner.query(`CREATE INDEX "IDX_attempts_provider_pending" ON attempts (provider_checked_at NULLS FIRST)
      WHERE provider_status IN ('queued', 'in_progress')`);
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`DROP INDEX "IDX_attempts_provider_pending"`);
    await queryRunner.query(`ALTER TABLE attempts DROP CONSTRAINT "CHK_attempts_resolved_by",
      DROP COLUMN resolved_by, DROP COLUMN provider_checked_at, DROP COLUMN provider_status`);
  }
}
