import pg from 'pg';

import { createTestDatabase, type TestDatabase } from '../helpers/database.js';
import { type PgBouncer, PGBOUNCER_BIN, pgbouncerAvailable, startPgBouncer } from '../helpers/pgbouncer.js';
import { type ServiceProcess, spawnService, waitUntilReady } from '../helpers/process.js';
import { client, createKey, FULL, jobsWithKeyPrefix, RACE_CATALOG, type RaceTarget, RUN, urlMode } from './target.js';

/**
 * The replicas case through a real PgBouncer in transaction pooling mode (docs/operations.md#pgbouncer): API processes
 * and workers share `poolSize` server connections on DATABASE_URL; migrations take their advisory lock over
 * DATABASE_DIRECT_URL. PgBouncer drops session state between transactions and refuses unknown startup parameters,
 * so any reliance on either fails here.
 */
const available = pgbouncerAvailable();
const missing = `PgBouncer is not installed (${PGBOUNCER_BIN}): apt-get install -y pgbouncer (.ci/run does it)`;
if (!available && !urlMode) {
  if (process.env.CI === 'true') {
    it('needs PgBouncer under CI', () => {
      throw new Error(missing);
    });
  } else {
    process.stderr.write(`\n*** SKIPPED test/race/pgbouncer.race-spec.ts: ${missing} ***\n\n`);
  }
}

(available && !urlMode ? describe : describe.skip)(
  'race suite: replicas behind PgBouncer (transaction pooling)',
  () => {
    let database: TestDatabase;
    let bouncer: PgBouncer;
    const services: ServiceProcess[] = [];
    let target: RaceTarget;
    const bouncerEnv = () => ({
      DATABASE_URL: bouncer.url,
      DATABASE_DIRECT_URL: database.url,
      CATALOG_FILE: RACE_CATALOG,
      WORKER_POLL_MS: '20',
      RECONCILE_INTERVAL_MS: '100',
      LOG_LEVEL: 'info',
    });

    beforeAll(async () => {
      database = await createTestDatabase();
      bouncer = await startPgBouncer(database.url, 20);
      // PgBouncer before 1.21 cannot carry named statements (Debian 12 ships 1.18): docs/operations.md#pgbouncer.
      const env = { ...bouncerEnv(), DB_PREPARED_STATEMENTS: 'false' };
      // Every process migrates at start (MIGRATIONS_RUN defaults to true): they serialise on the advisory lock.
      const roles = ['api', 'api', 'api', 'worker', 'worker'];
      services.push(...(await Promise.all(roles.map((ROLE) => spawnService({ ...env, ROLE })))));
      await Promise.all(services.map((s) => waitUntilReady(s, 90_000)));
      const apis = services.slice(0, 3);
      target = {
        mode: 'in-process',
        urls: apis.map((s) => s.baseUrl),
        keys: {
          owner: createKey(bouncer.url, 'bouncer-a', 'jobs:write,jobs:read', { DATABASE_DIRECT_URL: database.url }),
          operator: '',
        },
        close: async () => undefined,
      };
    }, 150_000);

    afterAll(async () => {
      for (const s of services) {
        if (s.child.exitCode === null && s.child.signalCode === null) s.kill('SIGTERM');
        await s.exited;
      }
      await bouncer?.stop();
      await database?.drop();
    });

    const [posts, keys] = FULL ? [1000, 100] : [300, 30];

    it(`settles exactly ${keys} jobs for ${posts} concurrent POSTs on ${keys} keys, with no error, through the pooler`, async () => {
      const owner = client(target, target.keys.owner);
      const prefix = `${RUN}-bouncer-`;
      // Warm pools, as in a running deployment: the burst then measures pooling, not 60 simultaneous logins on a busy host.
      await Promise.all(Array.from({ length: 60 }, (_, i) => owner.at(i).call('GET', '/v1/jobs?limit=1')));
      const answers = await Promise.all(
        Array.from({ length: posts }, (_, i) =>
          owner.at(i).create(`${prefix}${i % keys}`, { operation: 'summarize', input: { text: `intent ${i % keys}` } }),
        ),
      );
      const unavailable = services.flatMap((s) =>
        s
          .output()
          .split('\n')
          .filter((line) => line.includes('database unavailable')),
      );
      expect({
        failed: answers.filter((a) => a.status >= 500).map((a) => a.body),
        unavailable: unavailable.slice(0, 5),
      }).toEqual({ failed: [], unavailable: [] });
      expect(answers.filter((a) => a.status !== 200 && a.status !== 201)).toEqual([]);
      expect(answers.filter((a) => a.status === 201)).toHaveLength(keys);
      const ids = new Set(answers.map((a) => a.body.id));
      expect(ids.size).toBe(keys);

      const jobs = await jobsWithKeyPrefix(owner, prefix);
      expect(jobs).toHaveLength(keys);
      const settled = await Promise.all(
        [...ids].map((id) => owner.until(id, (job) => job.status === 'succeeded', 30_000)),
      );
      expect(settled.map((job) => job.attempts.filter((a: { outcome: string }) => a.outcome === 'won').length)).toEqual(
        settled.map(() => 1),
      );

      // The traffic really went through PgBouncer, and no process logged an error (level 50 and up).
      const stats = await bouncer.stats();
      const served = stats.find((row) => row.database === database.name);
      expect(Number(served?.total_xact_count ?? 0)).toBeGreaterThan(posts);
      for (const s of services) {
        const errors = s
          .output()
          .split('\n')
          .filter(
            (line) => /"level":(5\d|60)/.test(line) || /unsupported startup parameter|prepared statement/i.test(line),
          );
        expect(errors).toEqual([]);
      }
    }, 180_000);

    it('starts a replica later, after API keys were made through the pooler: no session is left holding the migration lock', async () => {
      // The apikey CLI migrates first: over DATABASE_DIRECT_URL, or its lock and unlock could reach two pooled server
      // sessions and the lock would stay held, and every replica started after it would wait at start-up forever.
      for (let i = 0; i < 4; i++) {
        createKey(bouncer.url, `bouncer-later-${i}`, 'jobs:read', { DATABASE_DIRECT_URL: database.url });
      }
      const direct = new pg.Client({ connectionString: database.url });
      await direct.connect();
      try {
        const held = await direct.query(
          `SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
        );
        expect(held.rows).toEqual([]);
      } finally {
        await direct.end();
      }
      const later = await spawnService({ ...bouncerEnv(), DB_PREPARED_STATEMENTS: 'false', ROLE: 'api' });
      services.push(later);
      await waitUntilReady(later, 30_000);
    }, 90_000);
  },
);

(available && !urlMode ? describe : describe.skip)(
  'PgBouncer before 1.21 (no prepared statements in transaction pooling)',
  () => {
    it('with DB_PREPARED_STATEMENTS left on, no create and no claim sees a refused named statement: it runs again unnamed, naming turns off, a warning says so', async () => {
      const database = await createTestDatabase();
      const bouncer = await startPgBouncer(database.url, 20);
      const env = {
        DATABASE_URL: bouncer.url,
        DATABASE_DIRECT_URL: database.url,
        CATALOG_FILE: RACE_CATALOG,
        WORKER_POLL_MS: '20',
        LOG_LEVEL: 'info',
      };
      // ROLE=all: the claims share the pool (and the refusals) with the creates.
      const service = await spawnService({ ...env, ROLE: 'all' });
      try {
        await waitUntilReady(service, 60_000);
        const owner = client(
          {
            mode: 'in-process',
            urls: [service.baseUrl],
            keys: { owner: '', operator: '' },
            close: async () => undefined,
          },
          createKey(bouncer.url, 'bouncer-p', 'jobs:write,jobs:read', { DATABASE_DIRECT_URL: database.url }),
        );
        const prefix = `${RUN}-bouncer-prepared-`;
        // Concurrent creates spread the pool over server connections: a named statement then meets one that lacks it.
        const first = await Promise.all(
          Array.from({ length: 60 }, (_, i) =>
            owner.at(0).create(`${prefix}a${i}`, { operation: 'summarize', input: { text: `a ${i}` } }),
          ),
        );
        expect(first.filter((a) => a.status !== 201).map((a) => [a.status, a.body])).toEqual([]);
        const after = await Promise.all(
          Array.from({ length: 60 }, (_, i) =>
            owner.at(0).create(`${prefix}b${i}`, { operation: 'summarize', input: { text: `b ${i}` } }),
          ),
        );
        expect(after.filter((a) => a.status !== 201)).toEqual([]);
        const settled = await Promise.all(
          [...first, ...after].map((a) => owner.until(a.body.id, (job) => job.status === 'succeeded', 30_000)),
        );
        expect(settled.filter((job) => job.status !== 'succeeded')).toEqual([]);
        const lines = service.output().split('\n');
        const refusal = lines.filter((line) => line.includes('refused a named statement'));
        expect(refusal).toHaveLength(1);
        expect(refusal[0]).toContain('DB_PREPARED_STATEMENTS=false');
        // Nothing failed: no error line (pino level 50 and up), no failed claim.
        expect(lines.filter((line) => /"level":(5\d|60)/.test(line) || /claim failed/.test(line))).toEqual([]);
      } finally {
        service.kill('SIGTERM');
        await service.exited;
        await bouncer.stop();
        await database.drop();
      }
    }, 120_000);
  },
);
