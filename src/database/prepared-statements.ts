import { createHash } from 'node:crypto';

/**
 * The hot statements, sent as named (prepared) statements: PostgreSQL parses and plans each once per connection
 * instead of once per execution (docs/benchmarks.md#prepared-statements: a create costs the server about a third
 * less). Only statements registered here are named, so a connection holds a bounded set: SQL built per call (a
 * batch of N rows) stays unnamed.
 *
 * A registered statement must name its output columns (no top-level `SELECT *` or `RETURNING *`): a migration that
 * adds a column then leaves a prepared statement valid on every running replica.
 *
 * Behind a transaction pooler, a named statement needs the pooler to track it (PgBouncer 1.21 or later with
 * `max_prepared_statements` above 0); otherwise set DB_PREPARED_STATEMENTS=false (docs/operations.md#pgbouncer).
 */
const names = new Map<string, string>();

/** Registers `sql` as a prepared statement and returns it unchanged, for a module-level constant. */
export function prepared(sql: string): string {
  names.set(sql, `oj_${createHash('sha256').update(sql).digest('hex').slice(0, 16)}`);
  return sql;
}

/** The statement name of a registered SQL text. */
export function statementName(sql: string): string | undefined {
  return names.get(sql);
}

/**
 * SQLSTATEs a server or pooler answers when it cannot keep a named statement: `26000` (it does not exist: the
 * pooler sent Bind to another server connection), `42P05` (it exists already: another client prepared it there).
 * Both are raised at Parse or Bind, before anything executes.
 */
export const UNSUPPORTED_PREPARED = new Set(['26000', '42P05']);
