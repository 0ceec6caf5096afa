import pg from 'pg';
import type { DataSourceOptions } from 'typeorm';
import { migrations } from '../../migrations/index.js';

export interface DataSourceSettings {
  url: string;
  poolSize: number;
  applicationName?: string;
  /** Client-side bound on one query (DB_QUERY_TIMEOUT_MS, see QUERY_TIMEOUT_MS); false for migrations, which may run long. */
  queryTimeoutMs?: number | false;
}

/**
 * How long one query may take before its caller gets an error. Client-side (pg's `query_timeout`), because a
 * server-side `statement_timeout` has no correct place behind PgBouncer in transaction mode: as a startup parameter
 * PgBouncer refuses the connection ("unsupported startup parameter"), and a session `SET` would stick to whichever
 * server connection ran it. A client-side bound also covers what a server-side one cannot: a frozen server or a
 * dead network. docs/operations.md#pgbouncer shows how to add the server-side bound per role, which frees the locks.
 */
export const QUERY_TIMEOUT_MS = 15_000;

/**
 * pg leaves a timed-out query running on its connection, so the next caller would queue behind it: the connection
 * is closed instead (the pool then drops it, and a pooler or the server ends the statement).
 */
class TimeoutClosingClient extends pg.Client {
  override query(...args: unknown[]): never {
    const result = (super.query as (...a: unknown[]) => unknown)(...args);
    if (result instanceof Promise) {
      result.catch((error: Error) => {
        if (error?.message === 'Query read timeout') void this.end().catch(() => undefined);
      });
    }
    return result as never;
  }
}

/**
 * The one options factory, shared by the app, the migration CLI and the tests. Repositories write their SQL
 * by hand (settlement is a compare-and-swap, claims use SKIP LOCKED), so no entity metadata is registered
 * and `synchronize` stays off: the schema is the migrations in `migrations/`.
 *
 * Nothing here may set session state (docs/operations.md#pgbouncer): no startup parameter beyond the ones PgBouncer
 * tracks (user, database, application_name), no `SET` on connect. Queries go unnamed (TypeORM never names a
 * prepared statement), which transaction pooling allows: Parse, Bind and Execute travel with their Sync.
 */
export function dataSourceOptions(settings: DataSourceSettings): DataSourceOptions {
  const queryTimeout = settings.queryTimeoutMs ?? QUERY_TIMEOUT_MS;
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
      // A server (or pooler) that accepts the TCP connection but never answers fails the caller after 3 s.
      connectionTimeoutMillis: 3000,
      idleTimeoutMillis: 30_000,
      // A peer that vanished without a FIN (a frozen VM, a dropped route) is noticed by the kernel, not never.
      keepAlive: true,
      keepAliveInitialDelayMillis: 10_000,
      ...(queryTimeout ? { query_timeout: queryTimeout, Client: TimeoutClosingClient } : {}),
    },
  };
}
