import { chmodSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import pg from 'pg';

import { type EmbeddedDatabase, freePort, startEmbeddedPostgres } from '../../src/database/embedded-postgres.js';
import { writeCatalog } from '../helpers/catalog.js';
import { createTestDatabase } from '../helpers/database.js';
import { type ServiceProcess, spawnService, waitUntilReady } from '../helpers/process.js';
import { createKey, describeLocal, FULL, RACE_CATALOG } from './target.js';

/**
 * Issue 11's liveness under faults, from the database's point of view: PostgreSQL stopped under load, a worker
 * SIGKILLed, NOTIFY never heard. Small under `npm test`, full with RACE_FULL=1 (`npm run test:race`).
 */

type Row = Record<string, any>;

/** LIVENESS_FIGURES=1 prints what each case measured (for docs/benchmarks.md-style notes). */
const figures = (label: string, value: unknown) => {
  if (process.env.LIVENESS_FIGURES === '1') console.log(label, JSON.stringify(value));
};

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Created {
  key: string;
  status: number | 'network';
  id?: string;
}

/** Creates jobs through the API in `loops` parallel loops until `running()` is false or `count` were tried. */
async function createJobs(
  baseUrl: string,
  apiKey: string,
  prefix: string,
  options: { loops: number; count: number; running?: () => boolean; body?: (i: number) => unknown; paceMs?: number },
): Promise<Created[]> {
  const created: Created[] = [];
  let next = 0;
  await Promise.all(
    Array.from({ length: options.loops }, async () => {
      while (next < options.count && (options.running?.() ?? true)) {
        const i = next++;
        const key = `${prefix}-${i}`;
        try {
          const res = await fetch(`${baseUrl}/v1/jobs`, {
            method: 'POST',
            headers: { authorization: `Bearer ${apiKey}`, 'idempotency-key': key, 'content-type': 'application/json' },
            body: JSON.stringify(options.body?.(i) ?? { operation: 'summarize', input: { text: key } }),
            signal: AbortSignal.timeout(10_000),
          });
          const body = (await res.json()) as { id?: string };
          created.push({ key, status: res.status, id: body.id });
        } catch {
          created.push({ key, status: 'network' });
        }
        await sleep(options.paceMs ?? 10);
      }
    }),
  );
  return created;
}

async function query(url: string, sql: string, params: unknown[] = []): Promise<Row[]> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return (await client.query(sql, params)).rows;
  } finally {
    await client.end();
  }
}

async function until<T>(
  probe: () => Promise<T>,
  done: (value: T) => boolean,
  timeoutMs: number,
  everyMs = 200,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    let value: T | undefined;
    try {
      value = await probe();
      if (done(value)) return value;
    } catch {
      // the database may be restarting
    }
    if (Date.now() > deadline) {
      throw new Error(`condition not met within ${timeoutMs} ms; last value: ${JSON.stringify(value)}`);
    }
    await sleep(everyMs);
  }
}

async function stopAll(processes: ServiceProcess[]): Promise<void> {
  for (const p of processes) {
    if (p.child.exitCode === null && p.child.signalCode === null) p.kill('SIGTERM');
    await p.exited;
  }
}

/** An embedded PostgreSQL of this file's own, which it may stop and start again on the same port. */
async function ownDatabase(): Promise<{
  current: () => EmbeddedDatabase;
  stop: () => Promise<void>;
  start: () => Promise<void>;
}> {
  const dir = mkdtempSync(join(tmpdir(), 'onejob-liveness-'));
  chmodSync(dir, 0o777);
  const port = await freePort();
  let database = await startEmbeddedPostgres({ dataDir: dir, database: 'onejob', port });
  return {
    current: () => database,
    stop: () => database.stop(),
    start: async () => {
      database = await startEmbeddedPostgres({ dataDir: dir, database: 'onejob', port });
    },
  };
}

describeLocal('race suite: liveness under faults (issue 11)', () => {
  // One embedded cluster for the cases that stop PostgreSQL (creating one costs seconds); each case has its owner.
  let db: Awaited<ReturnType<typeof ownDatabase>>;
  beforeAll(async () => {
    db = await ownDatabase();
  }, 60_000);
  afterAll(() => db?.stop());

  it('item 2: a worker holding results keeps retrying their settlement through a database outage: every answered job succeeds, none is left unknown', async () => {
    const catalogFile = writeCatalog((c) => {
      Object.assign(
        c.providers.find((p) => p.name === 'race-primary'),
        { timeoutMs: 15_000, hardTimeoutMs: 30_000, onTimeout: 'hold' },
      );
      c.providers.find((p) => p.name === 'race-primary').simulate.latencyMs = 1500;
    }, RACE_CATALOG);
    const env = {
      DATABASE_URL: db.current().url,
      CATALOG_FILE: catalogFile,
      WORKER_POLL_MS: '50',
      RECONCILE_INTERVAL_MS: '200',
      DB_POOL_SIZE: '4',
    };
    const api = await spawnService({ ...env, ROLE: 'api' });
    const processes = [api];
    try {
      await waitUntilReady(api, 60_000);
      const worker = await spawnService({ ...env, ROLE: 'worker', LOG_LEVEL: 'warn' });
      processes.push(worker);
      await waitUntilReady(worker, 60_000);
      const key = createKey(db.current().url, 'outage-results', 'jobs:write,jobs:read');
      const created = await createJobs(api.baseUrl, key, 'held', { loops: 4, count: FULL ? 60 : 16 });
      expect(created.every((c) => c.status === 201)).toBe(true);
      const ids = created.map((c) => c.id!);
      // Every call is in flight (1.5 s each) when PostgreSQL goes away; the answers come back while it is down.
      await until(
        () => query(db.current().url, `SELECT count(*)::int AS n FROM attempts WHERE status = 'running'`),
        (r) => r[0].n === ids.length,
        10_000,
        50,
      );
      await db.stop();
      await sleep(3500);
      await db.start();

      const jobs = await until(
        () => query(db.current().url, 'SELECT id, status FROM jobs WHERE id = ANY($1)', [ids]),
        (rows) => rows.length === ids.length && rows.every((r) => r.status === 'succeeded'),
        30_000,
      );
      expect(jobs).toHaveLength(ids.length);
      const attempts = await query(
        db.current().url,
        'SELECT job_id, status, outcome FROM attempts WHERE job_id = ANY($1)',
        [ids],
      );
      // One attempt each, settled by the worker that held the answer: no retry, no unknown, no operator.
      expect(attempts).toHaveLength(ids.length);
      expect(attempts.every((a) => a.status === 'succeeded' && a.outcome === 'won')).toBe(true);
      // It retried: the database being away is logged once per outage (DatabaseOutage), any other transient error
      // once per retry.
      expect(worker.output()).toMatch(
        /recording outcomes lost its database: retrying with back-off|recording the outcome failed; retrying/,
      );
    } finally {
      await stopAll(processes);
    }
  }, 120_000);

  it('batched claims across 3 worker processes that never hear NOTIFY: one claim per attempt, unique numbers, every job settles, first attempts start within a poll period', async () => {
    const database = await createTestDatabase();
    const catalogFile = writeCatalog((c) => {
      c.providers.push({
        name: 'race-503',
        kind: 'simulated',
        model: 'race-503',
        timeoutMs: 2000,
        hardTimeoutMs: 5000,
        maxAttempts: 3,
        simulate: { latencyMs: 5, outcome: 'error', errorStatus: 503 },
      });
    }, RACE_CATALOG);
    const pollMs = 200;
    const env = { DATABASE_URL: database.url, CATALOG_FILE: catalogFile, RECONCILE_INTERVAL_MS: '500' };
    const api = await spawnService({ ...env, ROLE: 'api' });
    const processes = [api];
    try {
      await waitUntilReady(api, 60_000);
      // LISTEN needs the direct URL: a closed port, so no worker ever hears a NOTIFY and only polling finds jobs.
      const closed = `postgres://nobody:nothing@127.0.0.1:${await freePort()}/none`;
      const workers = await Promise.all(
        // The API process migrated; the workers must not need the session URL for anything but LISTEN.
        Array.from({ length: 3 }, () =>
          spawnService({
            ...env,
            ROLE: 'worker',
            DATABASE_DIRECT_URL: closed,
            MIGRATIONS_RUN: 'false',
            WORKER_POLL_MS: String(pollMs),
            LOG_LEVEL: 'warn',
          }),
        ),
      );
      processes.push(...workers);
      await Promise.all(workers.map((w) => waitUntilReady(w, 60_000)));
      await until(
        async () => workers.map((w) => w.output()),
        (outputs) => outputs.every((o) => /LISTEN failed/.test(o)),
        10_000,
      );
      const key = createKey(database.url, 'claims', 'jobs:write,jobs:read');
      // A third of the jobs fail retryably three times (several attempts and claims per job), the rest succeed.
      const created = await createJobs(api.baseUrl, key, 'claim', {
        loops: 3,
        count: FULL ? 300 : 60,
        body: (i) => ({
          operation: 'summarize',
          input: { text: `claim ${i}` },
          providers: i % 3 === 0 ? ['race-503'] : undefined,
        }),
      });
      expect(created.every((c) => c.status === 201)).toBe(true);
      const ids = created.map((c) => c.id!);

      await until(
        () =>
          query(
            database.url,
            `SELECT count(*)::int AS n FROM jobs WHERE id = ANY($1) AND status IN ('succeeded', 'failed')`,
            [ids],
          ),
        (r) => r[0].n === ids.length,
        60_000,
      );
      const jobs = await query(database.url, 'SELECT id, status, providers FROM jobs WHERE id = ANY($1)', [ids]);
      for (const job of jobs) expect(job.status).toBe(job.providers[0] === 'race-503' ? 'failed' : 'succeeded');
      const attempts = await query(
        database.url,
        'SELECT id, job_id, number, worker_id, status FROM attempts WHERE job_id = ANY($1) ORDER BY job_id, number',
        [ids],
      );
      const perJob = new Map<string, number[]>();
      for (const a of attempts) perJob.set(a.job_id, [...(perJob.get(a.job_id) ?? []), a.number]);
      for (const job of jobs) {
        const numbers = perJob.get(job.id) ?? [];
        expect(numbers).toEqual(numbers.map((_, i) => i + 1)); // 1..n, no number twice, no gap
        expect(numbers.length).toBe(job.providers[0] === 'race-503' ? 3 : 1);
      }
      const claims = await query(
        database.url,
        `SELECT a.id, count(e.*)::int AS claims FROM attempts a LEFT JOIN job_events e ON e.attempt_id = a.id AND e.reason = 'claimed'
          WHERE a.job_id = ANY($1) GROUP BY a.id`,
        [ids],
      );
      expect(claims.filter((c) => c.claims !== 1)).toEqual([]);
      expect(new Set(attempts.map((a) => a.worker_id)).size).toBeGreaterThanOrEqual(2); // several processes claimed

      // Missed NOTIFY costs at most one poll period: the first attempt was claimed soon after the job's creation.
      const delays = (
        await query(
          database.url,
          `SELECT extract(epoch FROM a.claimed_at - j.created_at) * 1000 AS ms FROM jobs j JOIN attempts a ON a.job_id = j.id AND a.number = 1 WHERE j.id = ANY($1)`,
          [ids],
        )
      ).map((r) => Number(r.ms));
      const worst = Math.max(...delays);
      const sorted = [...delays].sort((a, b) => a - b);
      figures('first attempt claimed after creation (ms)', {
        jobs: ids.length,
        p50: Math.round(sorted[sorted.length >> 1]),
        worst: Math.round(worst),
        workers: new Set(attempts.map((a) => a.worker_id)).size,
      });
      // One poll period plus room for a claim on a loaded 2-core machine.
      expect(worst).toBeLessThan(pollMs + 800);
    } finally {
      await stopAll(processes);
      await database.drop();
    }
  }, 180_000);

  it('PostgreSQL stopped and a worker SIGKILLed under load: every 201 stored once, every job terminal or legitimately unknown in time, no result lost', async () => {
    const hardTimeoutMs = 3000;
    const reconcileMs = 300;
    const catalogFile = writeCatalog((c) => {
      Object.assign(
        c.providers.find((p) => p.name === 'race-primary'),
        { timeoutMs: 2000, hardTimeoutMs, onTimeout: 'hold' },
      );
      c.providers.find((p) => p.name === 'race-primary').simulate.latencyMs = 300;
    }, RACE_CATALOG);
    const env = {
      DATABASE_URL: db.current().url,
      CATALOG_FILE: catalogFile,
      WORKER_POLL_MS: '50',
      RECONCILE_INTERVAL_MS: String(reconcileMs),
      DB_POOL_SIZE: '4',
    };
    const api = await spawnService({ ...env, ROLE: 'api' });
    const processes = [api];
    try {
      await waitUntilReady(api, 60_000);
      const [victim, survivor] = await Promise.all([
        spawnService({ ...env, ROLE: 'worker' }),
        spawnService({ ...env, ROLE: 'worker', LOG_LEVEL: 'warn' }),
      ]);
      processes.push(victim, survivor);
      await Promise.all([victim, survivor].map((w) => waitUntilReady(w, 60_000)));
      const key = createKey(db.current().url, 'faults', 'jobs:write,jobs:read');

      let loading = true;
      const load = createJobs(api.baseUrl, key, 'load', {
        loops: FULL ? 4 : 2,
        paceMs: FULL ? 20 : 40,
        count: 5000,
        running: () => loading,
      });
      await sleep(1500);
      // Killed with calls in flight: their answers die with it (the only legitimate `unknown` left at the end).
      const inFlight = await until(
        () =>
          query(
            db.current().url,
            `SELECT count(*)::int AS n FROM attempts WHERE status = 'running' AND worker_id LIKE $1`,
            [`%:${victim.child.pid}:%`],
          ),
        (r) => r[0].n > 0,
        10_000,
        10,
      );
      victim.kill('SIGKILL');
      figures('victim calls in flight at SIGKILL', inFlight[0].n);
      await sleep(300);
      await db.stop();
      await sleep(3000);
      await db.start();
      await sleep(2000);
      loading = false;
      const created = await load;
      const victimPid = victim.child.pid!;
      expect((await victim.exited).signal).toBe('SIGKILL');

      // Quiet: no attempt in flight any more. It must come within the last hard deadline plus a reconciler period
      // (and room for a loaded machine).
      const [{ last }] = await query(
        db.current().url,
        `SELECT extract(epoch FROM max(hard_deadline_at)) * 1000 AS last FROM attempts`,
      );
      const quietBy = Number(last) + reconcileMs + 5000;
      await until(
        () =>
          query(db.current().url, `SELECT count(*)::int AS n FROM attempts WHERE status IN ('starting', 'running')`),
        (r) => r[0].n === 0,
        Math.max(1000, quietBy - Date.now()) + 20_000,
      );
      const quietAt = Date.now();
      figures('quiet after the last hard deadline (ms)', Math.round(quietAt - Number(last)));
      expect(quietAt).toBeLessThan(quietBy);
      await until(
        () => query(db.current().url, `SELECT count(*)::int AS n FROM jobs WHERE status IN ('pending', 'running')`),
        (r) => r[0].n === 0,
        20_000,
      );

      // Every 201 stored exactly once, under its key.
      const acknowledged = created.filter((c) => c.status === 201);
      expect(acknowledged.length).toBeGreaterThan(20);
      expect(
        created.filter(
          (c) => c.status === 'network' || (typeof c.status === 'number' && c.status !== 201 && c.status !== 503),
        ),
      ).toEqual([]);
      const stored = await query(
        db.current().url,
        `SELECT idempotency_key, id, status FROM jobs WHERE owner_id = 'faults'`,
      );
      const byKey = new Map(stored.map((r) => [r.idempotency_key as string, r]));
      expect(byKey.size).toBe(stored.length);
      for (const c of acknowledged) expect(byKey.get(c.key)?.id).toBe(c.id);

      // A survivor whose answer came while PostgreSQL was down kept trying to record it only until the attempt's hard
      // deadline (AttemptRunner.persist); past it the reconciler made the attempt unknown, and its look-up at the
      // provider settles it (the answer is not lost): wait for those look-ups before counting what is left unknown.
      await until(
        () =>
          query(
            db.current().url,
            `SELECT count(*)::int AS n FROM attempts WHERE status = 'unknown' AND worker_id NOT LIKE $1`,
            [`%:${victim.child.pid}:%`],
          ),
        (r) => r[0].n === 0,
        30_000,
      );
      // Terminal, or unknown only where an attempt may have reached the provider and its answer died with the victim.
      const attempts = await query(db.current().url, 'SELECT id, job_id, status, outcome, worker_id FROM attempts');
      const unknown = attempts.filter((a) => a.status === 'unknown');
      for (const a of unknown) expect(a.worker_id).toContain(`:${victimPid}:`);
      for (const job of stored) {
        if (job.status === 'unknown') expect(unknown.some((a) => a.job_id === job.id)).toBe(true);
        else expect(['succeeded', 'failed', 'cancelled']).toContain(job.status);
      }
      const [events] = await query(
        db.current().url,
        `SELECT count(*) FILTER (WHERE reason = 'not_sent')::int AS not_sent, count(*) FILTER (WHERE reason = 'deadline_passed_no_worker')::int AS overdue_running,
                count(*) FILTER (WHERE to_status = 'succeeded' AND from_status = 'unknown')::int AS settled_from_unknown FROM job_events`,
      );
      figures('fault run', {
        created: created.length,
        acknowledged: acknowledged.length,
        unknownLeft: unknown.length,
        ...events,
        retriedSettlements: (survivor.output().match(/recording the outcome failed/g) ?? []).length,
      });
      // No result lost: every answer recorded either won its job or was kept as discarded; a succeeded job has its winner.
      for (const a of attempts.filter((x) => x.status === 'succeeded')) {
        expect(['won', 'discarded']).toContain(a.outcome);
      }
      const [{ orphans }] = await query(
        db.current().url,
        `SELECT count(*)::int AS orphans FROM jobs j WHERE j.status = 'succeeded' AND NOT EXISTS (SELECT 1 FROM attempts a WHERE a.id = j.completed_by AND a.outcome = 'won')`,
      );
      expect(orphans).toBe(0);
      expect(stored.filter((j) => j.status === 'failed')).toEqual([]); // the provider always answers: nothing may fail
    } finally {
      await stopAll(processes);
    }
  }, 180_000);
});
