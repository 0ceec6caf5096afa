import type { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * The W3C traceparent of the request that created a job, so the worker's spans join that request's trace
 * (src/telemetry/tracing.ts). Null when the request was not traced. Adding a nullable column without a default
 * rewrites nothing and takes its lock only for an instant.
 */
export class AddJobTraceContext1795978100000 implements MigrationInterface {
  name = 'AddJobTraceContext1795978100000';

  async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`ALTER TABLE jobs ADD COLUMN trace_context text`);
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`ALTER TABLE jobs DROP COLUMN trace_context`);
  }
}
