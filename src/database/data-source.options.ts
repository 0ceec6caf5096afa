import type { DataSourceOptions } from 'typeorm';
import { migrations } from '../../migrations/index.js';

export interface DataSourceSettings {
  url: string;
  poolSize: number;
  applicationName?: string;
  /** node-postgres `query_timeout`: see DB_QUERY_TIMEOUT_MS in docs/operations.md. */
  queryTimeoutMs?: number;
}

/**
 * The one options factory, shared by the app, the migration CLI and the tests. Repositories write their SQL
 * by hand (settlement is a compare-and-swap, claims use SKIP LOCKED), so no entity metadata is registered
 * and `synchronize` stays off: the schema is the migrations in `migrations/`.
 */
export function dataSourceOptions(settings: DataSourceSettings): DataSourceOptions {
  return {
    type: 'postgres',
    url: settings.url,
    synchronize: false,
    migrationsRun: false,
    migrations,
    migrationsTableName: 'migrations',
    migrationsTransactionMode: 'each',
    entities: [],
    // Unique violations are expected (idempotent replays): errors are logged where they are understood.
    logging: false,
    applicationName: settings.applicationName ?? 'onejob',
    extra: {
      max: settings.poolSize,
      connectionTimeoutMillis: 3000,
      idleTimeoutMillis: 30_000,
      // A statement stuck on a lock must not hold a request forever.
      statement_timeout: 15_000,
      // The server's timeout needs a server that runs: a frozen or unreachable one is bounded here, just above
      // statement_timeout by default so that the server's own cancel normally comes first (pg-errors.ts: 503).
      query_timeout: settings.queryTimeoutMs ?? 16_000,
    },
  };
}
