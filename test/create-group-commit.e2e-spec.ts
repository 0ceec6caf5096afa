import { DataSource } from 'typeorm';

import { dataSourceOptions } from '../src/database/data-source.options.js';
import { runMigrationsLocked } from '../src/database/migrate.js';
import { JobsRepository, type NewJob } from '../src/ledger/jobs.repository.js';
import { DuplicateIdempotencyKeyError } from '../src/ledger/ledger.errors.js';
import { createTestDatabase, type TestDatabase } from './helpers/database.js';

/**
 * The group commit of creates (JobsRepository.insertJob) on a real PostgreSQL: creates that arrive together share
 * statements, and each is answered as if alone: a new key is created once with its event, a key that exists (before,
 * or earlier in the same moment) is a collision. The HTTP mapping of collisions is in test/jobs.e2e-spec.ts.
 */
describe('creates in groups', () => {
  let database: TestDatabase;
  let dataSource: DataSource;
  let jobs: JobsRepository;
  let statements = 0;

  const job = (ownerId: string, key: string, text = key): NewJob => ({
    ownerId,
    idempotencyKey: key,
    fingerprint: 'f'.repeat(64),
    operation: 'summarize',
    input: { text },
    providers: ['sim-primary'],
  });

  beforeAll(async () => {
    database = await createTestDatabase();
    dataSource = await new DataSource(dataSourceOptions({ url: database.url, poolSize: 8 })).initialize();
    await runMigrationsLocked(dataSource);
    const query = dataSource.manager.query.bind(dataSource.manager);
    dataSource.manager.query = ((sql: string, params?: unknown[]) => {
      if (sql.includes('jsonb_to_recordset') && sql.includes('INSERT INTO jobs')) statements++;
      return query(sql, params);
    }) as typeof dataSource.manager.query;
    jobs = new JobsRepository(dataSource);
  });
  afterAll(async () => {
    await dataSource.destroy();
    await database.drop();
  });

  it('answers each of 200 concurrent creates as if alone, in far fewer statements', async () => {
    await jobs.insertJob(job('a', 'existing-1'));
    await jobs.insertJob(job('a', 'existing-2'));
    statements = 0;
    // 150 new keys, 40 repeats of five of them (the same moment), 8 keys that exist, and 2 of another owner's.
    const requests = [
      ...Array.from({ length: 150 }, (_, i) => job('a', `new-${i}`)),
      ...Array.from({ length: 40 }, (_, i) => job('a', `new-${i % 5}`)),
      ...Array.from({ length: 8 }, (_, i) => job('a', `existing-${(i % 2) + 1}`)),
      job('b', 'new-0'),
      job('b', 'existing-1'),
    ];
    const answers = await Promise.allSettled(requests.map((r) => jobs.insertJob(r)));
    const created = answers.flatMap((a, i) =>
      a.status === 'fulfilled' ? [{ request: requests[i], job: a.value }] : [],
    );
    const collided = answers.flatMap((a, i) =>
      a.status === 'rejected' ? [{ request: requests[i], error: a.reason as unknown }] : [],
    );

    expect(collided.every((c) => c.error instanceof DuplicateIdempotencyKeyError)).toBe(true);
    // Exactly one creation per (owner, key); every other request for a key collided.
    const keys = (list: Array<{ request: NewJob }>) =>
      list.map((c) => `${c.request.ownerId}/${c.request.idempotencyKey}`).sort();
    expect(keys(created)).toEqual(
      [...new Set(requests.map((r) => `${r.ownerId}/${r.idempotencyKey}`))]
        .filter((k) => !k.startsWith('a/existing'))
        .sort(),
    );
    expect(collided).toHaveLength(40 + 8);
    // Each answer is its own row.
    for (const { request, job: row } of created) {
      expect(row).toMatchObject({
        ownerId: request.ownerId,
        idempotencyKey: request.idempotencyKey,
        input: request.input,
        status: 'pending',
      });
    }

    const [{ rows, events }] = await dataSource.query(
      `SELECT (SELECT count(*)::int FROM jobs) AS rows,
              (SELECT count(*)::int FROM job_events WHERE reason = 'created') AS events`,
    );
    expect({ rows, events }).toEqual({ rows: 2 + 152, events: 2 + 152 });
    expect(statements).toBeGreaterThan(0);
    expect(statements).toBeLessThan(requests.length / 2);
  });
});
