import type { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * What the retention purge deleted, kept as spend (docs/operations.md#retention): an owner's budget and
 * `/v1/usage` sum the cost of its attempts, and the purge deletes attempts, so with a retention under a month the
 * same budget could be spent again and again. The purge adds its attempts' usage here, per owner, UTC day they
 * started (`day`: its first instant), operation, provider and currency (null for unpriced ones), in the statement
 * that deletes them.
 */
export class KeepPurgedUsage1795979400000 implements MigrationInterface {
  name = 'KeepPurgedUsage1795979400000';

  async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`
      CREATE TABLE purged_usage (
        owner_id text NOT NULL,
        day timestamptz NOT NULL,
        operation text NOT NULL,
        provider text NOT NULL,
        currency character(3),
        attempts bigint NOT NULL,
        prompt_tokens bigint NOT NULL,
        completion_tokens bigint NOT NULL,
        cost numeric NOT NULL,
        discarded_cost numeric NOT NULL,
        CONSTRAINT "UQ_purged_usage_key" UNIQUE NULLS NOT DISTINCT (owner_id, day, operation, provider, currency)
      )`);
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`DROP TABLE purged_usage`);
  }
}
