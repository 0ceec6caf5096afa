import { Logger } from '@nestjs/common';
import pg from 'pg';
import type { DataSourceOptions } from 'typeorm';

import { migrations } from '../../migrations/index.js';
import { parsePostgresUrl, type PostgresTarget } from '../config/postgres-url.js';
import { statementName, UNSUPPORTED_PREPARED } from './prepared-statements.js';
import {
  askSession,
  locatorFor,
  NoAcceptableHostError,
  type PrimaryLocator,
  type ReportedSession,
  sessionAcceptable,
} from './primary-locator.js';
import { requestBoundApplies, retryTimeLeft, setRequestBudget } from './request-context.js';

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

type PoolClientConfig = pg.ClientConfig & {
  preparedState?: PreparedState;
  requestQueryTimeoutMs?: number;
  /** Set for a multi-host URL or target_session_attrs other than `any` (docs/operations.md#failover). */
  locator?: PrimaryLocator;
};

/**
 * Errors after which a connection is closed, never used again (docs/operations.md#failover): 25006, a write on a
 * server that went read-only under it (a primary demoted in place, its sessions left open); 57P01-57P03, the server
 * shutting down, crashed, or not yet accepting; the whole connection-exception class, 08.
 */
const POISON_CODES = new Set(['25006', '57P01', '57P02', '57P03']);

export function poisonsConnection(code: string | undefined): boolean {
  return code !== undefined && (POISON_CODES.has(code) || code.startsWith('08'));
}

type ParameterStatus = { parameterName: string; parameterValue: string };

/**
 * The pool's connection class. pg leaves a timed-out query running on its connection, so the next caller would
 * queue behind it: the connection is closed instead (the pool then drops it, and a pooler or the server ends the
 * statement). With `preparedStatements`, the registered statements go named (database/prepared-statements.ts).
 *
 * A named statement the server or a pooler refuses (UNSUPPORTED_PREPARED) did not run: it was refused at Parse or
 * Bind. Outside a transaction it is sent again at once, unnamed, so its caller never sees the refusal; inside one,
 * PostgreSQL has aborted the transaction, and the refusal reaches the caller marked retryable
 * (isRefusedNamedStatement): the ledger runs the transaction again, unnamed (src/database/transactions.ts).
 *
 * With a locator (several hosts, or target_session_attrs), a new connection goes to the host the locator picks and
 * checks what the server reported at log-in against the attributes; one that does not qualify is closed and the
 * locator looks again. A server that reports itself read-only or in recovery later (its role changed under an open
 * session) retires the connection as soon as it is idle, and the answers of poisonsConnection close it at once.
 */
class OnejobClient extends pg.Client {
  private readonly prepared?: PreparedState;
  private readonly requestQueryTimeoutMs?: number;
  private readonly locator?: PrimaryLocator;
  private readonly config: PoolClientConfig;
  private readonly reported: ReportedSession = {};
  private connectedOnce = false;
  private retiring = false;

  constructor(config: PoolClientConfig) {
    super(config);
    this.config = config;
    this.prepared = config.preparedState;
    this.requestQueryTimeoutMs = config.requestQueryTimeoutMs;
    this.locator = config.locator;
    this.connection.on('parameterStatus', (message: ParameterStatus) => this.onParameter(message));
  }

  override connect(): Promise<pg.Client>;
  override connect(callback: (error: Error) => void): void;
  override connect(callback?: (error: Error) => void): Promise<pg.Client> | void {
    const connected = this.connectToTarget();
    if (!callback) return connected.then(() => this);
    // pg-pool's callback: (error) on failure, (undefined) on success.
    const done = callback as (error?: Error) => void;
    connected.then(
      () => done(),
      (error: Error) => done(error),
    );
  }

  private async connectToTarget(): Promise<void> {
    if (!this.locator) {
      await (super.connect as () => Promise<unknown>)();
      this.connectedOnce = true;
      return;
    }
    const timeoutMs = this.config.connectionTimeoutMillis || 3000;
    const target = await this.locator.pick(this.config, timeoutMs);
    this.host = target.host;
    this.port = target.port;
    try {
      await (super.connect as () => Promise<unknown>)();
      const acceptable =
        sessionAcceptable(this.locator.attrs, this.reported) ??
        sessionAcceptable(this.locator.attrs, await askSession(this))!;
      if (!acceptable) {
        throw new NoAcceptableHostError(this.locator.attrs, [target], ['its role changed since it was chosen']);
      }
      this.connectedOnce = true;
    } catch (error) {
      this.locator.forget(target);
      await this.end().catch(() => undefined);
      throw error;
    }
  }

  private onParameter({ parameterName, parameterValue }: ParameterStatus): void {
    const name = parameterName as keyof ReportedSession;
    if (name !== 'in_hot_standby' && name !== 'default_transaction_read_only') return;
    const before = this.reported[name];
    this.reported[name] = parameterValue;
    // Reported after log-in: the server changed its role under this session. It takes no more work once idle.
    if (this.connectedOnce && parameterValue === 'on' && before !== 'on') {
      this.retiring = true;
      setImmediate(() => this.retireIfIdle());
    }
  }

  private retireIfIdle(): void {
    if (!this.retiring || this.getTransactionStatus() !== 'I') return;
    this.retiring = false;
    if (this.host) this.locator?.forget({ host: this.host, port: this.port });
    // Idle in the pool, the pool's error listener drops it; checked out, the release finds it ending.
    if (this.listenerCount('error') > 0) {
      const error = Object.assign(new Error('the server became read-only: connection retired'), { code: '25006' });
      this.emit('error', error);
    }
    void this.end().catch(() => undefined);
  }

  private poisoned(): void {
    if (this.host) this.locator?.forget({ host: this.host, port: this.port });
    void this.end().catch(() => undefined);
  }

  override query(...args: unknown[]): never {
    if (typeof args[0] !== 'string' || typeof args[args.length - 1] === 'function') {
      return this.send(args, undefined) as never;
    }
    const [text, values] = args as [string, unknown[] | undefined];
    const name = this.prepared?.on ? statementName(text) : undefined;
    // A client is waiting: its bound, not the background's (undefined leaves the pool's query_timeout).
    const queryTimeout =
      this.requestQueryTimeoutMs !== undefined && requestBoundApplies() ? this.requestBound() : undefined;
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

  /** The request path's bound, shortened in a retry to what is left of the request's budget (at least 100 ms). */
  private requestBound(): number {
    const left = retryTimeLeft();
    return Math.max(100, Math.min(this.requestQueryTimeoutMs!, left ?? Infinity));
  }

  private send(args: unknown[], name: string | undefined): unknown {
    const result = (super.query as (...a: unknown[]) => unknown)(...args);
    if (result instanceof Promise) {
      result.then(
        () => this.retiring && this.retireIfIdle(),
        (error: Error & { code?: string }) => {
          if (error?.message === 'Query read timeout') void this.end().catch(() => undefined);
          else if (poisonsConnection(error?.code)) this.poisoned();
          // "cached plan must not change result type": a statement outlived a schema change; a new connection
          // re-prepares.
          else if (name && error?.code === '0A000') void this.end().catch(() => undefined);
          else if (this.retiring) this.retireIfIdle();
        },
      );
    }
    return result;
  }
}

/**
 * A session connection of the same class (LISTEN, advisory locks held across transactions): the same host choice,
 * the same retirement. `url` may name several hosts.
 */
export function sessionClient(url: string, applicationName: string, connectionTimeoutMillis = 3000): pg.Client {
  const target = parsePostgresUrl(url);
  return new OnejobClient({
    connectionString: target.url,
    application_name: applicationName,
    connectionTimeoutMillis,
    keepAlive: true,
    keepAliveInitialDelayMillis: 10_000,
    locator: locatorOf(target),
  });
}

function locatorOf(target: PostgresTarget): PrimaryLocator | undefined {
  return target.hosts.length > 1 || target.targetSessionAttrs !== 'any'
    ? locatorFor(target.hosts, target.targetSessionAttrs)
    : undefined;
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
  const target = parsePostgresUrl(settings.url);
  const locator = locatorOf(target);
  if (settings.requestQueryTimeoutMs) setRequestBudget(settings.requestQueryTimeoutMs);
  return {
    type: 'postgres',
    // One host for TypeORM and pg to read; the locator chooses among the others (OnejobClient).
    url: target.url,
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
      ...(locator ? { locator } : {}),
      preparedState: { on: settings.preparedStatements === true } satisfies PreparedState,
      ...(settings.requestQueryTimeoutMs && queryTimeout
        ? { requestQueryTimeoutMs: Math.min(settings.requestQueryTimeoutMs, queryTimeout) }
        : {}),
      ...(queryTimeout ? { query_timeout: queryTimeout } : {}),
    },
  };
}
