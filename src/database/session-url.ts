import type { Env } from '../config/env.js';
import { postgresEndpoint } from '../config/postgres-url.js';

/**
 * The URL for what needs one server session for longer than a transaction: the migration advisory lock, LISTEN.
 * Behind PgBouncer in transaction mode DATABASE_URL is the pooler, where consecutive statements may reach different
 * server sessions; DATABASE_DIRECT_URL then names PostgreSQL itself (docs/operations.md#pgbouncer).
 */
export function sessionDatabaseUrl(config: Pick<Env, 'databaseUrl' | 'databaseDirectUrl'>): string | undefined {
  return config.databaseDirectUrl ?? config.databaseUrl;
}

/** `host:port[,host:port]/database` of a URL, for logs: never the user or the password. */
export function databaseEndpoint(url: string): string {
  return postgresEndpoint(url);
}
