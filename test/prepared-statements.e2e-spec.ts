import { DataSource } from 'typeorm';

import { CapacityRepository } from '../src/capacity/capacity.repository.js';
import { dataSourceOptions } from '../src/database/data-source.options.js';
import { migrateOver } from '../src/database/migrate.js';
import { prepared, statementName } from '../src/database/prepared-statements.js';
import { inTransaction } from '../src/database/transactions.js';
import { AttemptsRepository } from '../src/ledger/attempts.repository.js';
import { JobsRepository } from '../src/ledger/jobs.repository.js';
import { INSERT_JOB } from '../src/ledger/jobs.sql.js';
import { SettlementRepository } from '../src/ledger/settlement.repository.js';
import { createTestDatabase, type TestDatabase } from './helpers/database.js';

/**
 * DB_PREPARED_STATEMENTS (src/database/prepared-statements.ts) on a real PostgreSQL: registered statements go named,
 * nothing else does, and a statement that outlived a schema change costs one error, not a broken connection.
 * The pooler side (a PgBouncer that cannot carry them) is in test/race/pgbouncer.race-spec.ts.
 */
describe('prepared statements', () => {
  let database: TestDatabase;
  // One connection each: what one statement prepared, the next one on the same session can see.
  const open = (preparedStatements: boolean) =>
    new DataSource(dataSourceOptions({ url: database.url, poolSize: 1, preparedStatements })).initialize();
  const preparedNames = async (dataSource: DataSource) =>
    ((await dataSource.query('SELECT name FROM pg_prepared_statements')) as Array<{ name: string }>).map(
      (row) => row.name,
    );

  beforeAll(async () => {
    database = await createTestDatabase();
  });
  afterAll(async () => {
    await database.drop();
  });

  const registered = prepared('probe_next', 'SELECT $1::int + 1 AS next').text;
  const unregistered = 'SELECT $1::int + 2 AS next';

  it('names the registered statements, and only those, when on', async () => {
    // The name is the statement object's (src/ledger/jobs.sql.ts), not a hash of its text.
    expect(statementName(INSERT_JOB.text)).toBe('oj_insert_job');
    const dataSource = await open(true);
    try {
      await expect(dataSource.query(registered, [1])).resolves.toEqual([{ next: 2 }]);
      await expect(dataSource.query(registered, [2])).resolves.toEqual([{ next: 3 }]);
      await expect(dataSource.query(unregistered, [1])).resolves.toEqual([{ next: 3 }]);
      expect(await preparedNames(dataSource)).toEqual([statementName(registered)]);
    } finally {
      await dataSource.destroy();
    }
  });

  it('names nothing when off', async () => {
    const dataSource = await open(false);
    try {
      await expect(dataSource.query(registered, [1])).resolves.toEqual([{ next: 2 }]);
      expect(await preparedNames(dataSource)).toEqual([]);
    } finally {
      await dataSource.destroy();
    }
  });

  it('keeps a statement that names its columns valid across an added column, and recovers one that does not', async () => {
    const dataSource = await open(true);
    try {
      await dataSource.query('CREATE TABLE prepared_probe (a int)');
      await dataSource.query('INSERT INTO prepared_probe VALUES (1)');
      const named = prepared('probe_named', 'SELECT a FROM prepared_probe').text;
      const star = prepared('probe_star', 'SELECT * FROM prepared_probe').text;
      await dataSource.query(named);
      await dataSource.query(star);
      await dataSource.query('ALTER TABLE prepared_probe ADD COLUMN b int');
      // Another replica's migration: the named columns still answer as before.
      await expect(dataSource.query(named)).resolves.toEqual([{ a: 1 }]);
      // `*` changed its result type: PostgreSQL refuses the cached plan once; the connection is dropped and the next
      // call prepares it afresh.
      await expect(dataSource.query(star)).rejects.toThrow('cached plan must not change result type');
      await expect(dataSource.query(star)).resolves.toEqual([{ a: 1, b: null }]);
    } finally {
      await dataSource.destroy();
    }
  });

  it("keeps the claim path's named statements valid while another replica's migration adds columns", async () => {
    // A claim (provider states, due jobs, the attempts), the mark before the calls, and a settlement: each run once
    // to prepare it on the one connection, then again after columns were added to every table they read or return.
    await migrateOver(database.url, 'onejob-test-migrate');
    const dataSource = await open(true);
    const jobs = new JobsRepository(dataSource);
    const attempts = new AttemptsRepository(dataSource);
    const settlements = new SettlementRepository();
    const capacity = new CapacityRepository(dataSource);
    const cycle = async (key: string) => {
      const job = await jobs.insertJob(
        {
          ownerId: 'probe',
          idempotencyKey: key,
          fingerprint: key,
          operation: 'summarize',
          input: { text: key },
          providers: ['p'],
        },
        dataSource.manager,
      );
      await capacity.snapshot(dataSource.manager);
      const attempt = await dataSource.transaction(async (manager) => {
        const due = (await jobs.claimDue(10, { providers: ['p'], rooms: [10] }, manager)).jobs;
        expect(due.map((j) => j.id)).toEqual([job.id]);
        const [claimed] = await attempts.insertClaimed(
          [
            {
              jobId: job.id,
              provider: 'p',
              jobVersion: job.version,
              timeoutMs: 5000,
              hardTimeoutMs: 10000,
              workerId: 'w',
              jobFrom: 'pending',
            },
          ],
          manager,
        );
        return claimed;
      });
      const [running] = await attempts.markRunning(
        [{ id: attempt.id, timeoutMs: 5000, hardTimeoutMs: 10000 }],
        dataSource.manager,
      );
      expect(running.status).toBe('running');
      const settled = await settlements.settleResults(
        [
          {
            jobId: job.id,
            attemptId: attempt.id,
            eligibleFrom: ['running', 'unknown'],
            value: { summary: key },
            usage: { promptTokens: 1, completionTokens: 1 },
            providerRequestId: null,
            resultDigest: key,
          },
        ],
        dataSource.manager,
      );
      expect(settled.get(attempt.id)?.version).not.toBeNull();
    };
    try {
      await cycle('before');
      // The names PgBouncer's SHOW PREPARED_STATEMENTS lists (docs/operations.md#pgbouncer), one per statement object.
      expect((await preparedNames(dataSource)).sort()).toEqual([
        'oj_claim_due',
        'oj_insert_claimed',
        'oj_insert_job',
        'oj_mark_running',
        'oj_provider_states',
        'oj_settle_results',
      ]);
      for (const table of ['jobs', 'attempts', 'provider_state', 'job_events']) {
        await dataSource.query(`ALTER TABLE ${table} ADD COLUMN prepared_probe int`);
      }
      await cycle('after');
    } finally {
      for (const table of ['jobs', 'attempts', 'provider_state', 'job_events']) {
        await dataSource.query(`ALTER TABLE ${table} DROP COLUMN IF EXISTS prepared_probe`);
      }
      await dataSource.destroy();
    }
  });
  // What a transaction pooler without prepared-statement tracking does (PgBouncer < 1.21), made on one session: the
  // name is gone from the server connection the next Bind reaches (26000), or another client prepared it there first
  // (42P05). test/race/pgbouncer.race-spec.ts meets the same through a real PgBouncer.
  describe('a refused named statement (26000, 42P05) never reaches the caller', () => {
    const probe = prepared('probe_tens', 'SELECT $1::int * 10 AS tens').text;

    it('sends a refused autocommit statement again unnamed, and names nothing after', async () => {
      const dataSource = await open(true);
      try {
        await expect(dataSource.query(probe, [1])).resolves.toEqual([{ tens: 10 }]);
        // The pooler hands the next Bind to a server connection that never saw the Parse.
        await dataSource.query('DEALLOCATE ALL');
        await expect(dataSource.query(probe, [2])).resolves.toEqual([{ tens: 20 }]);
        await expect(dataSource.query(registered, [1])).resolves.toEqual([{ next: 2 }]);
        expect(await preparedNames(dataSource)).toEqual([]);
      } finally {
        await dataSource.destroy();
      }
    });

    it('runs a transaction whose named statement was refused (42P05, the name taken on that connection) again, unnamed', async () => {
      const dataSource = await open(true);
      try {
        // Another client of the pooler prepared the same name on this server connection.
        await dataSource.query(`PREPARE ${statementName(probe)} AS SELECT 0 AS other`);
        let runs = 0;
        const result = await inTransaction(dataSource, async (manager) => {
          runs++;
          await manager.query('SELECT 1');
          return manager.query(probe, [3]);
        });
        expect(result).toEqual([{ tens: 30 }]);
        expect(runs).toBe(2);
        // The second run went unnamed: the name on the connection is still the other client's.
        expect(await preparedNames(dataSource)).toEqual([statementName(probe)]);
      } finally {
        await dataSource.destroy();
      }
    });

    it('inserts a job, never fails it, when the pooled connection lost the create statement (26000)', async () => {
      await migrateOver(database.url, 'onejob-test-migrate');
      const dataSource = await open(true);
      const jobs = new JobsRepository(dataSource);
      const job = (key: string) => ({
        ownerId: 'probe',
        idempotencyKey: key,
        fingerprint: key,
        operation: 'summarize',
        input: { text: key },
        providers: ['p'],
      });
      try {
        await jobs.insertJob(job('refused-1'), dataSource.manager);
        await dataSource.query('DEALLOCATE ALL');
        await expect(jobs.insertJob(job('refused-2'), dataSource.manager)).resolves.toMatchObject({
          idempotencyKey: 'refused-2',
        });
        const [{ n }] = await dataSource.query(
          `SELECT count(*)::int AS n FROM jobs WHERE owner_id = 'probe' AND idempotency_key LIKE 'refused-%'`,
        );
        expect(n).toBe(2);
      } finally {
        await dataSource.destroy();
      }
    });

    it("inserts a budgeted owner's job, never fails it, when its transaction meets a lost statement (26000)", async () => {
      await migrateOver(database.url, 'onejob-test-migrate');
      // A pool of its own, naming on; no manager, so the create takes the budgeted group commit: LOCK_BUDGET and
      // the budgeted INSERT in a transaction, where the refusal aborts it.
      const dataSource = await open(true);
      const jobs = new JobsRepository(dataSource);
      const budgeted = (key: string) => ({
        ownerId: 'probe-budget',
        idempotencyKey: key,
        fingerprint: key,
        operation: 'summarize',
        input: { text: key },
        providers: ['p'],
        worstCaseTokens: { prompt: 10, completion: 10 },
      });
      try {
        await dataSource.query(
          `INSERT INTO owner_budgets (owner_id, monthly_limit, currency) VALUES ('probe-budget', 100, 'USD')`,
        );
        await jobs.insertJob(budgeted('budgeted-1'));
        await dataSource.query('DEALLOCATE ALL');
        await expect(jobs.insertJob(budgeted('budgeted-2'))).resolves.toMatchObject({ idempotencyKey: 'budgeted-2' });
      } finally {
        await dataSource.destroy();
      }
    });
  });
});
