import { randomBytes } from 'node:crypto';

import pg from 'pg';

import type { Queryable } from '../../src/database/transactions.js';
import { eventEdgeViolations } from './event-edges.js';

export interface TestDatabase {
  name: string;
  url: string;
  drop(): Promise<void>;
}

async function admin<T>(work: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: process.env.TEST_PG_ADMIN_URL });
  await client.connect();
  try {
    return await work(client);
  } finally {
    await client.end();
  }
}

/**
 * An empty database of its own for one test file; the app applies the real migrations to it at start. Before it is
 * dropped, every kind of row its job_events holds is checked against the state machine (test/helpers/event-edges.ts):
 * a statement that wrote a transition the machine does not have fails the file that made it write one.
 */
export async function createTestDatabase(): Promise<TestDatabase> {
  const name = `onejob_t_${randomBytes(6).toString('hex')}`;
  await admin((client) => client.query(`CREATE DATABASE ${name}`));
  const url = new URL(process.env.TEST_PG_ADMIN_URL!);
  url.pathname = `/${name}`;
  return {
    name,
    url: url.toString(),
    drop: async () => {
      const violations = await eventEdgeViolations(url.toString()).finally(() =>
        admin((client) => client.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)),
      );
      if (violations.length) {
        throw new Error(
          `job_events holds transitions that src/ledger/state-machine.ts does not:\n${violations.join('\n')}`,
        );
      }
    },
  };
}

/** The tables the migrations made (every table of the schema but TypeORM's own record of them). */
export async function schemaTables(db: Queryable): Promise<string[]> {
  const rows: Array<{ tablename: string }> = await db.query(
    `SELECT tablename FROM pg_tables WHERE schemaname = current_schema() AND tablename <> 'migrations' ORDER BY tablename`,
  );
  return rows.map((r) => r.tablename);
}

/** Empties every table of the schema, read from the catalog, so a table a migration adds is never forgotten. */
export async function truncateAll(db: Queryable): Promise<void> {
  const tables = await schemaTables(db);
  if (tables.length) await db.query(`TRUNCATE ${tables.map((t) => `"${t}"`).join(', ')} CASCADE`);
}
