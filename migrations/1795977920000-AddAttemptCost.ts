import type { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * The cost of every attempt, from its usage and its provider's price at the moment the usage is written
 * (docs/operations.md#cost). The price list is the catalog's `pricing`, copied into provider_prices at start;
 * a trigger prices the row in the statement that writes the usage (settlement, failure), so the ledger's
 * statements stay as they are and no round trip is added. Discarded results are priced like winners: they were
 * paid for.
 */
export class AddAttemptCost1795977920000 implements MigrationInterface {
  name = 'AddAttemptCost1795977920000';

  async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`
      CREATE TABLE provider_prices (
        provider text PRIMARY KEY,
        input_per_mtok numeric(18, 8) NOT NULL,
        output_per_mtok numeric(18, 8) NOT NULL,
        currency character(3) NOT NULL,
        updated_at timestamptz NOT NULL DEFAULT now(),
        CONSTRAINT "CHK_provider_prices_non_negative" CHECK (input_per_mtok >= 0 AND output_per_mtok >= 0)
      )`);
    await queryRunner.query(
      `ALTER TABLE attempts ADD COLUMN cost numeric(18, 8), ADD COLUMN cost_currency character(3)`,
    );
    await queryRunner.query(`
      CREATE FUNCTION attempts_price_usage() RETURNS trigger LANGUAGE plpgsql AS $$
      DECLARE
        price provider_prices%ROWTYPE;
      BEGIN
        -- Priced once, when the usage arrives: a later status change keeps the price of the time.
        IF TG_OP = 'UPDATE' AND NEW.usage IS NOT DISTINCT FROM OLD.usage AND OLD.cost IS NOT NULL THEN
          RETURN NEW;
        END IF;
        SELECT * INTO price FROM provider_prices WHERE provider = NEW.provider;
        IF FOUND THEN
          NEW.cost := round((COALESCE((NEW.usage->>'promptTokens')::numeric, 0) * price.input_per_mtok
                           + COALESCE((NEW.usage->>'completionTokens')::numeric, 0) * price.output_per_mtok) / 1000000, 8);
          NEW.cost_currency := price.currency;
        END IF;
        RETURN NEW;
      END $$`);
    await queryRunner.query(`
      CREATE TRIGGER "TRG_attempts_price_usage" BEFORE INSERT OR UPDATE OF usage ON attempts
      FOR EACH ROW WHEN (NEW.usage IS NOT NULL) EXECUTE FUNCTION attempts_price_usage()`);
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`DROP TRIGGER "TRG_attempts_price_usage" ON attempts`);
    await queryRunner.query(`DROP FUNCTION attempts_price_usage()`);
    await queryRunner.query(`ALTER TABLE attempts DROP COLUMN cost_currency, DROP COLUMN cost`);
    await queryRunner.query(`DROP TABLE provider_prices`);
  }
}
