import { Logger } from '@nestjs/common';
import pg from 'pg';
import type { DataSourceOptions } from 'typeorm';

import { migrations } from '../../migrations/index.js';
import { statementName, UNSUPPORTED_PREPARED } from './prepared-statements.js';
import { requestBoundApplies } from './request-context.js';

export interface DataSourceSettings {
  url: string;
  poolSize: number;
  applicationName?: string;
  /**
   * Client-side bound on one query (DB_QUERY_TIMEOUT_MS, see QUERY_TIMEOUT_MS); false for migrations, which may run
   * long.
   */
  queryTimeoutMs?: number | false;
  /**
   * The bound on a query made while serving an HTTP request (DB_REQUEST_TIMEOUT_MS), shorter than the background's:
   * a client waiting on a frozen database gets its 503 before its own timeout. Unset: queryTimeoutMs for all.
   */
  requestQueryTimeoutMs?: number;
  /**
   * Send the registered hot statements named (DB_PREPARED_STATEMENTS; database/prepared-statements.ts). Off by
   * default.
   */
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

/** Per pool: the first refusal of a named statement turns naming off for every later query of that pool. */
interface PreparedState {
  on: boolean;
}

type PoolClientConfig = pg.ClientConfig & { preparedState?: PreparedState; requestQueryTimeoutMs?: number };

/**
 * The pool's connection class. pg leaves a timed-out query running on its connection, so the next caller would
 * queue behind it: the connection is closed instead (the pool then drops it, and a pooler or the server ends the
 * statement). With `preparedStatements`, the registered statements go named (database/prepared-statements.ts).
 *
 * A named statement the server or a pooler refuses (UNSUPPORTED_PREPARED) did not run: it was refused at Parse or
 * Bind. Outside a transaction it is sent again at once, unnamed, so its caller never sees the refusal; inside one,
 * PostgreSQL has aborted the transaction, and the refusal reaches the caller marked retryable
 * (isRefusedNamedStatement): the ledger runs the transaction again, unnamed (src/database/transactions.ts).
 */
class OnejobClient extends pg.Client {
  private readonly prepared?: PreparedState;
  private readonly requestQueryTimeoutMs?: number;

  constructor(config: PoolClientConfig) {
    super(config);
    this.prepared = config.preparedState;
    this.requestQueryTimeoutMs = config.requestQueryTimeoutMs;
  }

  override query(...args: unknown[]): never {
    if (typeof args[0] !== 'string' || typeof args[args.length - 1] === 'function') {
      return this.send(args, undefined) as never;
    }
    const [text, values] = args as [string, unknown[] | undefined];
    const name = this.prepared?.on ? statementName(text) : undefined;
    // A client is waiting: its bound, not the background's (undefined leaves the pool's query_timeout).
    const queryTimeout =
      this.requestQueryTimeoutMs !== undefined && requestBoundApplies() ? this.requestQueryTimeoutMs : undefined;
    const unnamed = () => this.send([{ text, values, query_timeout: queryTimeout }], undefined);
    if (!name) return unnamed() as never;
    return (this.send([{ name, text, values, query_timeout: queryTimeout }], name) as Promise<unknown>).catch(
      (error: Error & { code?: string }) => {
        if (!error?.code || !UNSUPPORTED_PREPARED.has(error.code)) throw error;
        refusePrepared(this.prepared!, error);
        if (this.getTransactionStatus() === 'I') return unnamed();
        throw error;
      },
    ) as never;
  }

  private send(args: unknown[], name: string | undefined): unknown {
    const result = (super.query as (...a: unknown[]) => unknown)(...args);
    if (result instanceof Promise) {
      result.catch((error: Error & { code?: string }) => {
        if (error?.message === 'Query read timeout') void this.end().catch(() => undefined);
        // "cached plan must not change result type": a statement outlived a schema change; a new connection
        // re-prepares.
        else if (name && error?.code === '0A000') void this.end().catch(() => undefined);
      });
    }
    return result;
  }
}

function refusePrepared(state: PreparedState, error: Error & { code?: string }): void {
  if (!state.on) return;
  state.on = false;
  new Logger('Database').warn(
    `the database refused a named statement (${error.code}: ${error.message}): ` +
      'a transaction pooler that does not track prepared statements is in the way. ' +
      'The statement ran again unnamed, and statements go unnamed from now on in this process; ' +
      'set DB_PREPARED_STATEMENTS=false for it (docs/operations.md#pgbouncer).',
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
      preparedState: { on: settings.preparedStatements === true } satisfies PreparedState,
      ...(settings.requestQueryTimeoutMs && queryTimeout
        ? { requestQueryTimeoutMs: Math.min(settings.requestQueryTimeoutMs, queryTimeout) }
        : {}),
      ...(queryTimeout ? { query_timeout: queryTimeout } : {}),
    },
  };
}
