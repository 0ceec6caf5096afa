import { DataSource } from 'typeorm';

import { dataSourceOptions } from '../../src/database/data-source.options.js';
import { runMigrationsLocked } from '../../src/database/migrate.js';
import { createTestDatabase, type TestDatabase, truncateAll } from '../helpers/database.js';

/** A database of its own with the real migrations applied, and a pool on it: no Nest, no Fastify, no worker. */
export interface MigratedDatabase {
  dataSource: DataSource;
  database: TestDatabase;
  truncate(): Promise<void>;
  /** Closes the pool, then checks job_events against the state machine and drops the database. */
  close(): Promise<void>;
}

/**
 * The middle tier's database (docs/testing.md#the-middle-tier): what the app's start does to a fresh database
 * (runMigrationsLocked over the app's own DataSource options), without the app.
 */
export async function migratedDatabase(poolSize = 6): Promise<MigratedDatabase> {
  const database = await createTestDatabase();
  const dataSource = new DataSource(
    dataSourceOptions({ url: database.url, poolSize, applicationName: 'onejob-medium' }),
  );
  try {
    await dataSource.initialize();
    await runMigrationsLocked(dataSource);
  } catch (error) {
    if (dataSource.isInitialized) await dataSource.destroy();
    await database.drop();
    throw error;
  }
  return {
    dataSource,
    database,
    truncate: () => truncateAll(dataSource),
    close: async () => {
      await dataSource.destroy();
      await database.drop();
    },
  };
}
