import { UNSUPPORTED_PREPARED } from './prepared-statements.js';

/** The one place that reads PostgreSQL and node-postgres errors: SQLSTATE, constraint names, lost connections. */
interface PgLikeError {
  code?: string;
  constraint?: string;
  message?: string;
  driverError?: PgLikeError;
  cause?: unknown;
}

function driverErrorOf(error: unknown): PgLikeError | undefined {
  if (typeof error !== 'object' || error === null) return undefined;
  const e = error as PgLikeError;
  return e.driverError ?? e;
}

/** The constraint a unique violation (23505) broke, or undefined for any other error. */
export function uniqueViolationOf(error: unknown): string | undefined {
  const e = driverErrorOf(error);
  return e?.code === '23505' ? e.constraint : undefined;
}

const connectionCodes = new Set([
  // A write on a server that went read-only: a primary demoted under its open sessions (docs/operations.md#failover).
  '25006',
  'ECONNREFUSED',
  'ECONNRESET',
  'ENOTFOUND',
  'ETIMEDOUT',
  'EPIPE',
  'EHOSTUNREACH',
  '57P01',
  '57P02',
  '57P03',
  '53300',
]);
const connectionMessages = [
  'Connection terminated',
  'timeout exceeded when trying to connect',
  // node-postgres' client-side query_timeout, and a connect that got no answer (connectionTimeoutMillis).
  'Query read timeout',
  'Connection terminated due to connection timeout',
  'Client has encountered a connection error',
  'Connection ended unexpectedly',
  'terminating connection',
  'the database system is',
  'Client was closed',
  'Cannot use a pool after calling end',
];

/** True when the database could not be reached or dropped the connection: the caller should answer 503. */
export function isDatabaseUnavailable(error: unknown, depth = 0): boolean {
  if (depth > 3 || typeof error !== 'object' || error === null) return false;
  const e = driverErrorOf(error)!;
  if (e.code && (connectionCodes.has(e.code) || e.code.startsWith('08'))) return true;
  if (typeof e.message === 'string' && connectionMessages.some((m) => e.message!.includes(m))) return true;
  const aggregate = (error as { errors?: unknown[] }).errors;
  if (Array.isArray(aggregate) && aggregate.some((inner) => isDatabaseUnavailable(inner, depth + 1))) return true;
  return isDatabaseUnavailable((error as PgLikeError).cause, depth + 1);
}

/**
 * A transaction whose COMMIT was sent and whose answer never came: it may have committed or not, and only a read of
 * what it wrote can tell (docs/operations.md#failover). Still a database outage to whoever does not read it back.
 */
export class CommitOutcomeUnknownError extends Error {
  constructor(override readonly cause: unknown) {
    super(`the answer to COMMIT was lost: ${(cause as Error)?.message ?? String(cause)}`);
    this.name = 'CommitOutcomeUnknownError';
  }
}

/** A serialization failure or deadlock: the transaction did nothing and may simply run again. */
export function isRetryableTransactionError(error: unknown): boolean {
  const code = driverErrorOf(error)?.code;
  return code === '40001' || code === '40P01';
}

/**
 * A named statement that a pooler without prepared-statement tracking refused at Parse or Bind (26000, 42P05):
 * nothing ran. Inside a transaction PostgreSQL has aborted it; run the transaction again (transactions.ts), and it
 * goes unnamed, as the refusal turned naming off (data-source.options.ts).
 */
export function isRefusedNamedStatement(error: unknown): boolean {
  const code = driverErrorOf(error)?.code;
  return code !== undefined && UNSUPPORTED_PREPARED.has(code);
}
