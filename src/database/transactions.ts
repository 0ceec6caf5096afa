import type { DataSource, EntityManager } from 'typeorm';

/** What repository methods run their SQL on: the pool, or a transaction a service opened. */
export type Queryable = Pick<EntityManager, 'query'>;

export function on(dataSource: DataSource, manager?: Queryable): Queryable {
  return manager ?? dataSource.manager;
}

/** node-postgres answers UPDATE ... RETURNING through TypeORM as [rows, rowCount]. */
export function updatedRows<T>(result: unknown): T[] {
  return Array.isArray(result) && Array.isArray(result[0]) ? (result[0] as T[]) : (result as T[]);
}

/** The one typed seam over hand-written SQL: the rows of a SELECT, or of an INSERT/UPDATE/DELETE ... RETURNING. */
export async function rowsOf<T>(queryable: Queryable, sql: string, params: unknown[] = []): Promise<T[]> {
  return updatedRows<T>(await queryable.query(sql, params));
}
