import { DataSource, type Migration } from 'typeorm';

import { dataSourceOptions } from './data-source.options.js';

/** Any fixed 64-bit number: replicas starting together serialise their migration runs on it. */
const MIGRATION_LOCK_KEY = 7_355_608_201;
// Note: holds one pooled connection for the lock while runMigrations takes another: a pool needs at least two.

/**
 * Applies pending migrations under a session-level advisory lock, on one pinned connection. `dataSource` must reach
 * PostgreSQL directly (sessionDatabaseUrl): through PgBouncer in transaction mode the unlock could reach another server
 * session than the lock, and the lock would stay held until that server connection closes.
 */
export async function runMigrationsLocked(dataSource: DataSource): Promise<Migration[]> {
  const runner = dataSource.createQueryRunner();
  await runner.connect();
  try {
    await runner.query('SELECT pg_advisory_lock($1)', [MIGRATION_LOCK_KEY]);
    try {
      return await dataSource.runMigrations({ transaction: 'each' });
    } finally {
      await runner.query('SELECT pg_advisory_unlock($1)', [MIGRATION_LOCK_KEY]);
    }
  } finally {
    await runner.release();
  }
}

/** True when every migration the code knows has been applied. */
export async function migrationsApplied(dataSource: DataSource): Promise<boolean> {
  return !(await dataSource.showMigrations());
}

/**
 * The CLIs' way in: pending migrations on a DataSource of its own over `url`, which must be a session URL
 * (sessionDatabaseUrl: DATABASE_DIRECT_URL behind a pooler), then closed. Through PgBouncer in transaction mode the
 * lock and the unlock could reach two server sessions, and the lock would stay held on a pooled connection: every
 * replica started after that would wait for it forever.
 */
export async function migrateOver(url: string, applicationName: string): Promise<Migration[]> {
  const dataSource = await new DataSource(
    dataSourceOptions({ url, poolSize: 2, applicationName, queryTimeoutMs: false }),
  ).initialize();
  try {
    return await runMigrationsLocked(dataSource);
  } finally {
    await dataSource.destroy();
  }
}
