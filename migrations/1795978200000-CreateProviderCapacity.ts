import type { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * Provider capacity shared by every replica (docs/design.md#capacity): one state row per provider (rate buckets, a
 * pause asked for by the provider's own 429, the circuit breaker) and one lease row per call in flight to a
 * provider with maxConcurrency. A lease carries its own expiry, so a crashed replica's capacity comes back by
 * itself. `jobs.waiting_for` names the provider a due job waits on for capacity: claims take such jobs only up to
 * the room that provider has, so they never block jobs on other providers.
 */
export class CreateProviderCapacity1795978200000 implements MigrationInterface {
  name = 'CreateProviderCapacity1795978200000';

  async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`
      CREATE TABLE provider_state (
        provider text PRIMARY KEY,
        paused_until timestamptz,
        breaker_state text NOT NULL DEFAULT 'closed' CHECK (breaker_state IN ('closed', 'open', 'half_open')),
        breaker_since timestamptz,
        breaker_until timestamptz,
        probe_attempt_id uuid,
        failures timestamptz[] NOT NULL DEFAULT '{}',
        request_bucket float8,
        token_bucket float8,
        refilled_at timestamptz,
        window_start timestamptz,
        requests_in_window integer NOT NULL DEFAULT 0,
        tokens_in_window bigint NOT NULL DEFAULT 0,
        updated_at timestamptz NOT NULL DEFAULT now()
      )`);
    await queryRunner.query(`
      CREATE TABLE provider_leases (
        attempt_id uuid PRIMARY KEY,
        provider text NOT NULL,
        expires_at timestamptz NOT NULL
      )`);
    await queryRunner.query(`CREATE INDEX "IDX_provider_leases_provider" ON provider_leases (provider, expires_at)`);
    await queryRunner.query(`ALTER TABLE jobs ADD COLUMN waiting_for text`);
    // The claim's scan of due jobs never walks past a backlog waiting for capacity: waiting jobs have an index of
    // their own, per provider, read only up to the room the provider has.
    await queryRunner.query(`DROP INDEX "IDX_jobs_due"`);
    await queryRunner.query(
      `CREATE INDEX "IDX_jobs_due" ON jobs (next_attempt_at) WHERE next_attempt_at IS NOT NULL AND waiting_for IS NULL`,
    );
    await queryRunner.query(
      `CREATE INDEX "IDX_jobs_waiting" ON jobs (waiting_for, next_attempt_at) WHERE next_attempt_at IS NOT NULL AND waiting_for IS NOT NULL`,
    );
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`DROP INDEX "IDX_jobs_waiting"`);
    await queryRunner.query(`DROP INDEX "IDX_jobs_due"`);
    await queryRunner.query(`ALTER TABLE jobs DROP COLUMN waiting_for`);
    await queryRunner.query(`CREATE INDEX "IDX_jobs_due" ON jobs (next_attempt_at) WHERE next_attempt_at IS NOT NULL`);
    await queryRunner.query(`DROP TABLE provider_leases`);
    await queryRunner.query(`DROP TABLE provider_state`);
  }
}
