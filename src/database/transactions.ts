import type { DataSource, EntityManager } from 'typeorm';

import { CommitOutcomeUnknownError, isDatabaseUnavailable, isRefusedNamedStatement } from './pg-errors.js';
import type { Statement } from './prepared-statements.js';
import { requestDeadline, retryAllowed, retryWithin } from './request-context.js';

/** What repository methods run their SQL on: the pool, or a transaction a service opened. */
export type Queryable = Pick<EntityManager, 'query'>;

export function on(dataSource: DataSource, manager?: Queryable): Queryable {
  return manager ?? dataSource.manager;
}

/** node-postgres answers UPDATE ... RETURNING through TypeORM as [rows, rowCount]. */
export function updatedRows<T>(result: unknown): T[] {
  return Array.isArray(result) && Array.isArray(result[0]) ? (result[0] as T[]) : (result as T[]);
}

/**
 * The one typed seam over hand-written SQL: the rows of a SELECT, or of an INSERT/UPDATE/DELETE ... RETURNING.
 * A statement object (database/prepared-statements.ts) brings its parameters' and row's types.
 */
export async function rowsOf<P extends readonly unknown[], R>(
  queryable: Queryable,
  sql: Statement<P, R>,
  params: P,
): Promise<R[]>;
export async function rowsOf<T>(queryable: Queryable, sql: string | Statement, params?: unknown[]): Promise<T[]>;
export async function rowsOf(queryable: Queryable, sql: string | Statement, params: readonly unknown[] = []) {
  return updatedRows(await queryable.query(typeof sql === 'string' ? sql : sql.text, params as unknown[]));
}

/** A statement run for its effect: its text, not its rows. */
export async function run(queryable: Queryable, sql: Statement, params: readonly unknown[] = []): Promise<unknown> {
  return queryable.query(sql.text, params as unknown[]);
}

/**
 * `dataSource.transaction(work)`, run once more when it failed before it could have committed
 * (docs/operations.md#failover): a pooler refused one of its named statements (that refusal aborted the transaction
 * before the statement ran, and turned naming off, so the second run goes unnamed: docs/operations.md#pgbouncer), or
 * its connection was lost or refused before COMMIT was sent (a failover: the connection is gone, so the second run
 * gets a fresh one, on the new primary where there is one). A COMMIT sent whose answer was lost is not run again:
 * it throws CommitOutcomeUnknownError, for the caller to read back what it wrote. `work` must be safe to run twice:
 * database work only, effects after commit.
 */
export async function inTransaction<T>(
  dataSource: DataSource,
  work: (manager: EntityManager) => Promise<T>,
): Promise<T> {
  const deadline = requestDeadline(Date.now());
  try {
    return await transactionOnce(dataSource, work);
  } catch (error) {
    if (isRefusedNamedStatement(error)) return transactionOnce(dataSource, work);
    if (!failedBeforeCommit(error) || !retryAllowed(deadline)) throw error;
    return retryWithin(deadline, () => transactionOnce(dataSource, work));
  }
}

/** Lost or refused before anything could commit: a run on a fresh connection is safe. */
export function failedBeforeCommit(error: unknown): boolean {
  return isDatabaseUnavailable(error) && !(error instanceof CommitOutcomeUnknownError);
}

async function transactionOnce<T>(dataSource: DataSource, work: (manager: EntityManager) => Promise<T>): Promise<T> {
  let committing = false;
  try {
    return await dataSource.transaction(async (manager) => {
      const result = await work(manager);
      committing = true;
      return result;
    });
  } catch (error) {
    if (committing && isDatabaseUnavailable(error)) throw new CommitOutcomeUnknownError(error);
    throw error;
  }
}
