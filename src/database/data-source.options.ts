import { Logger } from '@nestjs/common';
import pg from 'pg';
import type { DataSourceOptions } from 'typeorm';
import { migrations } from '../../migrations/index.js';
import { statementName, UNSUPPORTED_PREPARED } from './prepared-statements.js';

export interface DataSourceSettings {
  url: string;
  poolSize: number;
  applicationName?: string;
  /** Client-side bound on one query (DB_QUERY_TIMEOUT_MS, see QUERY_TIMEOUT_MS); false for migrations, which may run long. */
  queryTimeoutMs?: number | false;
  /** Send the registered hot statements named (DB_PREPARED_STATEMENTS; database/prepared-statements.ts). Off by default. */
  preparedStatements?: boolean;
}

/**
 * How long one query may take before its caller gets an error. Client-side (pg's `query_timeout`), because a
 * server-side `statement_timeout` has no correct place behind PgBouncer in transaction mode: as a startup parameter
 * PgBouncer refuses the connection ("unsupported startup parameter"), and a session `SET` would stick to whichever
 * server connection ran it. A client-side bound also covers what a server-side one cannot: a frozen server or a
 * dead network. docs/operations.md#pgbouncer shows how to add the server-side bound per role, which frees the locks.
 */
export const QUERY_TIMEOUT_MS = 15_000;

/** Turned off for the whole process the first time the server or a pooler refuses a named statement. */
let preparedRefused = false;

/**
 * The pool's connection class. pg leaves a timed-out query running on its connection, so the next caller would
 * queue behind it: the connection is closed instead (the pool then drops it, and a pooler or the server ends the
 * statement). With `preparedStatements`, the registered statements go named (database/prepared-statements.ts).
 */
class OnejobClient extends pg.Client {
  private readonly prepare: boolean;

  constructor(config: pg.ClientConfig & { preparedStatements?: boolean }) {
    super(config);
    this.prepare = config.preparedStatements === true;
  }

  override query(...args: unknown[]): never {
    const name = this.prepare && !preparedRefused && typeof args[0] === 'string' ? statementName(args[0]) : undefined;
    const call = name ? [{ name, text: args[0], values: args[1] }, ...args.slice(2)] : args;
    const result = (super.query as (...a: unknown[]) => unknown)(...call);
    if (result instanceof Promise) {
      result.catch((error: Error & { code?: string }) => {
        if (error?.message === 'Query read timeout') void this.end().catch(() => undefined);
        else if (name && error?.code && UNSUPPORTED_PREPARED.has(error.code)) refusePrepared(error);
        // "cached plan must not change result type": a statement outlived a schema change; a new connection re-prepares.
        else if (name && error?.code === '0A000') void this.end().catch(() => undefined);
      });
    }
    return result as never;
  }
}

function refusePrepared(error: Error & { code?: string }): void {
  if (preparedRefused) return;
  preparedRefused = true;
  new Logger('Database').error(
    `the database refused a named statement (${error.code}: ${error.message}): a transaction pooler that does not track prepared ` +
      'statements is in the way. Statements go unnamed from now on in this process; set DB_PREPARED_STATEMENTS=false for it ' +
      '(docs/operations.md#pgbouncer).',
  );
}

/**
 * The one options factory, shared by the app, the migration CLI and the tests. Repositories write their SQL
 * by hand (settlement is a compare-and-swap, claims use SKIP LOCKED), so no entity metadata is registered
 * and `synchronize` stays off: the schema is the migrations in `migrations/`.
 *
 * Nothing here may set session state (docs/operations.md#pgbouncer): no startup parameter beyond the ones PgBouncer
 * tracks (user, database, application_name), no `SET` on connect. Queries go unnamed (TypeORM never names a
 * prepared statement): unnamed statements are what transaction pooling allows, Parse, Bind and Execute travelling
 * with their Sync. The exceptions are the registered hot statements when `preparedStatements` is on.
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
      Client: OnejobClient,
      preparedStatements: settings.preparedStatements === true,
      ...(queryTimeout ? { query_timeout: queryTimeout } : {}),
    },
  };
}
