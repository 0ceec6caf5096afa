import type { MigrationInterface, QueryRunner } from 'typeorm';

/** Stored certification reports: a provider's run of an operation's contract suite, for one contract digest. */
export class CreateCertifications1795977400000 implements MigrationInterface {
  name = 'CreateCertifications1795977400000';

  async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`
      CREATE TABLE certifications (
        id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
        provider text NOT NULL,
        operation text NOT NULL,
        contract_digest character(64) NOT NULL,
        passed boolean NOT NULL,
        report jsonb NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now()
      )`);
    await queryRunner.query(
      `CREATE INDEX "IDX_certifications_current" ON certifications (provider, operation, contract_digest, created_at DESC)`,
    );
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`DROP TABLE certifications`);
  }
}
