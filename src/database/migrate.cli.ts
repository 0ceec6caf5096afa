import 'reflect-metadata';

import { loadEnv } from '../config/app.config.js';
import { resolveDatabase } from './database-url.js';
import { migrateOver } from './migrate.js';
import { sessionDatabaseUrl } from './session-url.js';

async function main(): Promise<void> {
  const env = loadEnv();
  // The advisory lock needs one session: PostgreSQL itself, not a transaction pooler (docs/operations.md#pgbouncer).
  const database = await resolveDatabase({ ...env, databaseUrl: sessionDatabaseUrl(env) });
  try {
    const applied = await migrateOver(database.url, 'onejob-migrate');
    process.stdout.write(
      applied.length ? `applied: ${applied.map((m) => m.name).join(', ')}\n` : 'no pending migrations\n',
    );
  } finally {
    await database.stop();
  }
}

main().catch((error: Error) => {
  process.stderr.write(`migration failed: ${error.message}\n`);
  process.exit(1);
});
