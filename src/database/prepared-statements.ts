/**
 * Statements as named objects (docs/sql/ holds every one as PostgreSQL receives it, written by `npm run sql:write`
 * from the `*.sql.ts` modules). A statement has a name, its SQL text and, in its TypeScript type, its parameters
 * and its row; the module that declares it is its feature's (src/ledger/jobs.sql.ts: the jobs table's).
 *
 * The hot ones are sent as named (prepared) statements, `oj_<name>`: PostgreSQL parses and plans each once per
 * connection instead of once per execution (docs/benchmarks.md#prepared-statements: a create costs the server about
 * a third less). Only statements declared `prepared` are named, so a connection holds a bounded set: SQL built per
 * call (a batch of N rows) stays unnamed.
 *
 * A prepared statement must name its output columns (no top-level `SELECT *` or `RETURNING *`): a migration that
 * adds a column then leaves a prepared statement valid on every running replica.
 *
 * Behind a transaction pooler, a named statement needs the pooler to track it (PgBouncer 1.21 or later with
 * `max_prepared_statements` above 0); otherwise set DB_PREPARED_STATEMENTS=false (docs/operations.md#pgbouncer).
 */
export interface Statement<Params extends readonly unknown[] = unknown[], Row = unknown> {
  /** snake_case, unique in the process: the `-- name:` of docs/sql/, and `oj_<name>` when sent named. */
  readonly name: string;
  readonly text: string;
  /** Sent named (`oj_<name>`) when DB_PREPARED_STATEMENTS is on. */
  readonly prepared: boolean;
  /** Phantom: the parameters' and the row's types, for `rowsOf`. Never set. */
  readonly types?: { params: Params; row: Row };
}

/**
 * A statement whose text is built per call (a VALUES list of N rows, an optional filter): its `shape` is one
 * representative call's text, which docs/sql/ shows, and it is never sent named.
 */
export interface DynamicStatement<Args extends readonly unknown[] = unknown[]> {
  readonly name: string;
  readonly dynamic: true;
  readonly build: (...args: Args) => string;
  readonly shape: string;
}

const PREFIX = 'oj_';
/** Prepared text → statement name: what the pool's client looks up for each query it sends. */
const preparedNames = new Map<string, string>();
const declared = new Map<string, string>();

function declare(name: string, text: string): void {
  if (!/^[a-z][a-z0-9_]*$/.test(name) || PREFIX.length + name.length > 63) {
    throw new Error(`statement name ${JSON.stringify(name)}: snake_case, at most ${63 - PREFIX.length} characters`);
  }
  const known = declared.get(name);
  if (known !== undefined && known !== text) throw new Error(`two statements are named ${name}`);
  declared.set(name, text);
}

/** A statement sent unnamed (parsed on each execution). */
export function statement<Params extends readonly unknown[] = unknown[], Row = unknown>(
  name: string,
  text: string,
): Statement<Params, Row> {
  declare(name, text);
  return { name, text, prepared: false };
}

/** A hot statement: sent named, `oj_<name>`, when DB_PREPARED_STATEMENTS is on. */
export function prepared<Params extends readonly unknown[] = unknown[], Row = unknown>(
  name: string,
  text: string,
): Statement<Params, Row> {
  declare(name, text);
  const known = preparedNames.get(text);
  if (known !== undefined && known !== PREFIX + name) throw new Error(`${name} and ${known} share their text`);
  preparedNames.set(text, PREFIX + name);
  return { name, text, prepared: true };
}

/** A statement built per call; `shape` is what docs/sql/ shows of it. */
export function dynamic<Args extends readonly unknown[]>(
  name: string,
  build: (...args: Args) => string,
  ...example: Args
): DynamicStatement<Args> {
  const shape = build(...example);
  declare(name, shape);
  return { name, dynamic: true, build, shape };
}

/** The name a text is sent under (`oj_<name>`), for the pool's client; undefined for an unnamed statement. */
export function statementName(text: string): string | undefined {
  return preparedNames.get(text);
}

export function isStatement(value: unknown): value is Statement | DynamicStatement {
  return (
    typeof value === 'object' &&
    value !== null &&
    typeof (value as Statement).name === 'string' &&
    (typeof (value as Statement).text === 'string' || (value as DynamicStatement).dynamic === true)
  );
}

/**
 * SQLSTATEs a server or pooler answers when it cannot keep a named statement: `26000` (it does not exist: the
 * pooler sent Bind to another server connection), `42P05` (it exists already: another client prepared it there).
 * Both are raised at Parse or Bind, before anything executes.
 */
export const UNSUPPORTED_PREPARED = new Set(['26000', '42P05']);
