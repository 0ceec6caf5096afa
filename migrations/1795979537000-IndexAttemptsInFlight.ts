import type { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * An owner's maxConcurrency counts its calls in flight (docs/design.md#fair-share): attempts `starting`, `running`,
 * `unknown` or `cancelled` whose hard deadline is ahead (the worker still holds the call until then). A capped
 * owner's claim counts them by a range scan of this index from now: it reads the calls open now, never the history
 * of cancelled attempts behind them (a cancelled attempt stays in the index, before the range read). An attempt
 * enters it when it is created and leaves it when it succeeds or fails: writes that already rewrite its other partial
 * indexes (its status changes).
 */
export class IndexAttemptsInFlight1795979537000 implements MigrationInterface {
  name = 'IndexAttemptsInFlight1795979537000';

  async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(
      `CREATE INDEX "IDX_attempts_in_flight" ON attempts (hard_deadline_at)
        WHERE status IN ('starting', 'running', 'unknown', 'cancelled')`,
    );
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`DROP INDEX "IDX_attempts_in_flight"`);
  }
}
