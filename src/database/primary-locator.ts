import pg from 'pg';

import type { PostgresHost, TargetSessionAttrs } from '../config/postgres-url.js';

/** What a server reports of itself at log-in (PostgreSQL 14 and later send both as ParameterStatus). */
export interface ReportedSession {
  in_hot_standby?: string;
  default_transaction_read_only?: string;
}

/**
 * Whether a session meets target_session_attrs, as libpq decides it: `read-write` wants a server out of recovery
 * with read-write transactions by default; `primary` a server out of recovery; `any` takes what it gets. Undefined:
 * the server did not say (before PostgreSQL 14), and the caller asks it (SESSION_ATTRS_SQL).
 */
export function sessionAcceptable(attrs: TargetSessionAttrs, reported: ReportedSession): boolean | undefined {
  if (attrs === 'any') return true;
  if (reported.in_hot_standby === undefined) return undefined;
  if (reported.in_hot_standby === 'on') return false;
  if (attrs === 'primary') return true;
  if (reported.default_transaction_read_only === undefined) return undefined;
  return reported.default_transaction_read_only !== 'on';
}

/** libpq's own questions, for a server that reports neither parameter. */
export const SESSION_ATTRS_SQL =
  "SELECT CASE WHEN pg_is_in_recovery() THEN 'on' ELSE 'off' END AS in_hot_standby, " +
  "current_setting('default_transaction_read_only') AS default_transaction_read_only";

export async function askSession(client: pg.Client): Promise<ReportedSession> {
  const { rows } = await client.query<Required<ReportedSession>>(SESSION_ATTRS_SQL);
  return rows[0];
}

/** No host of the list met target_session_attrs in time: the database has no primary now (a 503, like a lost one). */
export class NoAcceptableHostError extends Error {
  /** SQLSTATE 08001, sqlclient_unable_to_establish_sqlconnection: what libpq reports, and what pg-errors.ts reads. */
  readonly code = '08001';

  constructor(attrs: TargetSessionAttrs, hosts: PostgresHost[], reasons: string[]) {
    super(
      `no host of ${hosts.map((h) => `${h.host}:${h.port}`).join(',')} accepted a ${attrs} session: ` +
        reasons.join('; '),
    );
    this.name = 'NoAcceptableHostError';
  }
}

/**
 * Finds the host of a multi-host URL that new connections go to, as libpq does for `postgres://h1,h2/db?
 * target_session_attrs=read-write`: the first host, in the order given, that answers and meets the attributes.
 * Every connection of a process to that URL shares one locator, so after a failover the list is probed once, not
 * once per connection: the hosts are tried at once (each within the connect timeout), and the first in order that
 * qualifies is kept until a connection to it fails or finds it no longer qualifies (`forget`).
 */
export class PrimaryLocator {
  private current?: PostgresHost;
  private probing?: Promise<PostgresHost>;

  constructor(
    readonly hosts: PostgresHost[],
    readonly attrs: TargetSessionAttrs,
  ) {}

  /** The host to connect to now; probes the list when none is known. */
  pick(base: pg.ClientConfig, timeoutMs: number): Promise<PostgresHost> {
    if (this.current) return Promise.resolve(this.current);
    this.probing ??= this.probe(base, timeoutMs).finally(() => (this.probing = undefined));
    return this.probing;
  }

  /** A connection to `host` failed, or found it no longer qualifies: the next pick probes the list again. */
  forget(host: PostgresHost): void {
    if (this.current && this.current.host === host.host && this.current.port === host.port) this.current = undefined;
  }

  private async probe(base: pg.ClientConfig, timeoutMs: number): Promise<PostgresHost> {
    const reasons: string[] = new Array<string>(this.hosts.length);
    const results = this.hosts.map((host, i) =>
      this.qualifies(base, host, timeoutMs).then(
        (ok) => {
          if (!ok) reasons[i] = `${host.host}:${host.port} is ${this.attrs === 'primary' ? 'a standby' : 'read-only'}`;
          return ok;
        },
        (error: Error) => {
          reasons[i] = `${host.host}:${host.port}: ${error.message}`;
          return false;
        },
      ),
    );
    // The first in the order given that qualifies, as soon as every host before it is known not to.
    for (let i = 0; i < results.length; i++) {
      if (await results[i]) {
        this.current = this.hosts[i];
        return this.current;
      }
    }
    throw new NoAcceptableHostError(this.attrs, this.hosts, reasons);
  }

  private async qualifies(base: pg.ClientConfig, host: PostgresHost, timeoutMs: number): Promise<boolean> {
    const client = new pg.Client({
      ...base,
      connectionTimeoutMillis: timeoutMs,
      application_name: `${base.application_name ?? 'onejob'}-probe`,
    });
    // After the constructor: a connectionString in `base` names the first host, and would win over host and port.
    client.host = host.host;
    client.port = host.port;
    const reported: ReportedSession = {};
    client.connection.on('parameterStatus', (message: { parameterName: string; parameterValue: string }) => {
      reported[message.parameterName as keyof ReportedSession] = message.parameterValue;
    });
    client.on('error', () => undefined);
    try {
      await client.connect();
      return sessionAcceptable(this.attrs, reported) ?? sessionAcceptable(this.attrs, await askSession(client))!;
    } finally {
      await client.end().catch(() => undefined);
    }
  }
}

const locators = new Map<string, PrimaryLocator>();

/** One locator per host list and attributes in a process: the pool, LISTEN and migrations share what they learn. */
export function locatorFor(hosts: PostgresHost[], attrs: TargetSessionAttrs): PrimaryLocator {
  const key = `${attrs} ${hosts.map((h) => `${h.host}:${h.port}`).join(',')}`;
  let locator = locators.get(key);
  if (!locator) {
    locator = new PrimaryLocator(hosts, attrs);
    locators.set(key, locator);
  }
  return locator;
}
