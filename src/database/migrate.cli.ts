import 'reflect-metadata';
import { DataSource } from 'typeorm';
import { loadEnv } from '../config/app.config.js';
import { dataSourceOptions } from './data-source.options.js';
import { resolveDatabase } from './database-url.js';
import { runMigrationsLocked } from './migrate.js';
import { sessionDatabaseUrl } from './session-url.js';

async function main(): Promise<void> {
  const env = loadEnv();
  // The advisory lock needs one session: PostgreSQL itself, not a transaction pooler (docs/operations.md#pgbouncer).
  const database = await resolveDatabase({ ...env, databaseUrl: sessionDatabaseUrl(env) });
  const dataSource = await new DataSource(dataSourceOptions({ url: database.url, poolSize: 2, applicationName: 'onejob-migrate', queryTimeoutMs: false })).initialize();
  try {
    const applied = await runMigrationsLocked(dataSource);
    process.stdout.write(applied.length ? `applied: ${applied.map((m) => m.name).join(', ')}\n` : 'no pending migrations\n');
  } finally {
    await dataSource.destroy();
    await database.stop();
  }
}

main().catch((error: Error) => {
  process.stderr.write(`migration failed: ${error.message}\n`);
  process.exit(1);
});
