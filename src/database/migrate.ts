import type { DataSource, Migration } from 'typeorm';

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
