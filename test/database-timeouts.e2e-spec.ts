import { DataSource } from 'typeorm';

import { dataSourceOptions } from '../src/database/data-source.options.js';
import { createTestDatabase, type TestDatabase } from './helpers/database.js';

/** The client-side statement bound of src/database/data-source.options.ts, on a real PostgreSQL. */
describe('query timeout (client-side, pooler-safe)', () => {
  let database: TestDatabase;
  let dataSource: DataSource;

  beforeAll(async () => {
    database = await createTestDatabase();
    // One connection: a timed-out query left on it would hold up the next caller.
    dataSource = await new DataSource(
      dataSourceOptions({ url: database.url, poolSize: 1, queryTimeoutMs: 300 }),
    ).initialize();
  });
  afterAll(async () => {
    await dataSource.destroy();
    await database.drop();
  });

  it('fails a query that outlives the bound, and serves the next caller at once on a fresh connection', async () => {
    const started = Date.now();
    await expect(dataSource.query('SELECT pg_sleep(3)')).rejects.toThrow('Query read timeout');
    expect(Date.now() - started).toBeLessThan(2000);
    const next = Date.now();
    await expect(dataSource.query('SELECT 1 AS one')).resolves.toEqual([{ one: 1 }]);
    // Not queued behind the 3 s sleep still running on the old connection.
    expect(Date.now() - next).toBeLessThan(1500);
  });

  it('sends no startup parameter PgBouncer refuses (statement_timeout, options)', async () => {
    const [row] = await dataSource.query(`SELECT current_setting('statement_timeout') AS value`);
    expect(row.value).toBe('0');
  });
});
