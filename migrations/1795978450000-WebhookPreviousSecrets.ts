import type { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * Every secret a rotation retired keeps signing until the expiry that rotation promised
 * (`previousSecretExpiresAt`), so a second rotation within the overlap no longer drops the first old secret:
 * `previous_secrets` is a list of `{secret, expiresAt}` in place of the single previous secret and its expiry.
 */
export class WebhookPreviousSecrets1795978450000 implements MigrationInterface {
  name = 'WebhookPreviousSecrets1795978450000';

  async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`ALTER TABLE webhook_endpoints ADD COLUMN previous_secrets jsonb NOT NULL DEFAULT '[]'`);
    await queryRunner.query(`
      UPDATE webhook_endpoints
         SET previous_secrets = jsonb_build_array(jsonb_build_object('secret', previous_secret, 'expiresAt', previous_secret_expires_at))
       WHERE previous_secret IS NOT NULL AND previous_secret_expires_at > now()`);
    await queryRunner.query(
      `ALTER TABLE webhook_endpoints DROP COLUMN previous_secret, DROP COLUMN previous_secret_expires_at`,
    );
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(
      `ALTER TABLE webhook_endpoints ADD COLUMN previous_secret text, ADD COLUMN previous_secret_expires_at timestamptz`,
    );
    // Only one previous secret fits the old shape: the one that lasts longest.
    await queryRunner.query(`
      WITH last AS (
        SELECT w.id, p.value->>'secret' AS secret, (p.value->>'expiresAt')::timestamptz AS expires_at
          FROM webhook_endpoints w
          CROSS JOIN LATERAL (SELECT value FROM jsonb_array_elements(w.previous_secrets)
                               ORDER BY (value->>'expiresAt')::timestamptz DESC LIMIT 1) p
      )
      UPDATE webhook_endpoints w SET previous_secret = last.secret, previous_secret_expires_at = last.expires_at
        FROM last WHERE last.id = w.id`);
    await queryRunner.query(`ALTER TABLE webhook_endpoints DROP COLUMN previous_secrets`);
  }
}
