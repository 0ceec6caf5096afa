/**
 * npm run bench: the service over loopback (autocannon) against the ceiling set by PostgreSQL itself, measured in
 * the same run: the same SQL the service issues for each case (the repositories' own statements), executed directly
 * through `pg` at the same concurrency. Writes bench/results/<date>.json and prints one table.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';

import autocannon from 'autocannon';
import pg from 'pg';

import { freePort, startEmbeddedPostgres } from '../src/database/embedded-postgres.js';
import { statementName } from '../src/database/prepared-statements.js';
import type { Queryable } from '../src/database/transactions.js';
import { AttemptsRepository } from '../src/ledger/attempts.repository.js';
import { JobsRepository } from '../src/ledger/jobs.repository.js';
import { DuplicateIdempotencyKeyError } from '../src/ledger/ledger.errors.js';
import { SettlementRepository } from '../src/ledger/settlement.repository.js';
import { batchCase, type BatchRow, batchTable } from './batch.js';
import { batchAdmissionCase, type BatchAdmissionRow, batchAdmissionTable } from './batch-admission.js';
import { batchStreamsCase, type BatchStreamsRow, batchStreamsTable } from './batch-streams.js';
import { capacityCase, type CapacityRow, capacityTable } from './capacity.js';
import { claimCase, type ClaimRow, claimTable } from './claim.js';
import { postgresCpuSeconds, postmasterPid, processCpuSeconds } from './cpu.js';
import { drainCase, type DrainRow, drainStatements, drainTable } from './drain.js';
import { failoverCase, type FailoverRow, failoverTable } from './failover.js';
import { fairnessCase, type FairnessRow, fairnessTable } from './fairness.js';
import { historyCase, type HistoryResult, historyTable, retentionTable } from './history.js';
import { benchIssuer } from './jwt-issuer.js';
import {
  claimOwnersCase,
  type ClaimOwnersRow,
  claimOwnersTable,
  drainOwnersCase,
  type DrainOwnersRow,
  drainOwnersTable,
} from './owners.js';
import { type OneSecondRow, oneSecondTable, pipelineOneSecond } from './pipeline-1s.js';
import { resolutionCase, type ResolutionRow, resolutionTable } from './resolution.js';
import { soakCase, type SoakResult, soakTable } from './soak.js';
import { soakPlot } from './soak-plot.js';
import { sseCase, type SseRow, sseTable } from './sse.js';

const CASES = [
  'create',
  'create-jwt',
  'replay',
  'get',
  'storm',
  'pipeline',
  'pipeline-1s',
  'capacity',
  'fairness',
  'batch',
  'batch-admission',
  'batch-streams',
  'resolution',
  'sse',
  'claim',
  'history',
  'retention',
  'soak',
  'failover',
  'claim-owners',
  'drain-owners',
  'drain',
] as const;
type Case = (typeof CASES)[number];
/** Cases that take minutes to tens of minutes (10 million rows, a 30-minute soak, 30 failovers): run only when named. */
const ON_REQUEST: readonly Case[] = [
  'history',
  'retention',
  'soak',
  'failover',
  'batch-admission',
  'batch-streams',
  'claim-owners',
  'drain-owners',
  'drain',
];

interface Measure {
  rps: number;
  p50: number;
  p99: number;
  non2xx?: number;
  designed?: string;
}

interface Row {
  case: Case;
  service: Measure;
  ceiling: Measure;
  ratio: number;
  /** PostgreSQL alone (pgbench, prepared statements) running the same statements; absent without pgbench. */
  postgres?: { tps: number; latencyMs: number };
  /**
   * The same with unnamed statements (`-M extended`: parsed and planned every time), as the service sends them with
   * DB_PREPARED_STATEMENTS=false (behind a PgBouncer that cannot carry named statements).
   */
  postgresUnnamed?: { tps: number; latencyMs: number };
  /** create and get: the floor (bench/floor.server.ts: Fastify + pg and the case's statement, nothing else), under the same HTTP load. */
  floor?: Measure & { cpuPer1000: { process: number; postgres: number | null } };
  /** The service's CPU seconds per 1,000 requests (or settled jobs), and PostgreSQL's. */
  cpuPer1000?: { service: number; postgres: number | null };
  peakRssMb: number;
}

const { values: args } = parseArgs({
  options: {
    duration: { type: 'string', default: '6' },
    connections: { type: 'string', default: '32' },
    cases: { type: 'string', default: CASES.filter((c) => !ON_REQUEST.includes(c)).join(',') },
    'soak-minutes': { type: 'string', default: '30' },
    'soak-retention-minutes': { type: 'string', default: '5' },
    'history-jobs': { type: 'string', default: '10000000' },
    out: { type: 'string' },
    // The service's tree (its dist/ and bench catalog): another checkout, built, for a before/after in one run.
    'service-dir': { type: 'string', default: '.' },
    // failover: failovers of each kind on each engine (bench/failover.ts).
    failovers: { type: 'string', default: '5' },
  },
});
const duration = Number(args.duration);
const connections = Number(args.connections);
const cases = args.cases!.split(',').filter((c): c is Case => (CASES as readonly string[]).includes(c));
const body = (text: string) => JSON.stringify({ operation: 'summarize', input: { text } });
const NEW_JOB = { operation: 'summarize', input: { text: 'bench' }, providers: ['bench-zero'] };

function percentile(sorted: number[], p: number): number {
  return sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] : 0;
}

/** `connections` loops, each running `work` back to back for `seconds`: the ceiling's load shape. */
async function closedLoop(seconds: number, work: (loop: number, i: number) => Promise<void>): Promise<Measure> {
  const latencies: number[] = [];
  const until = performance.now() + seconds * 1000;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: connections }, async (_, loop) => {
      for (let i = 0; performance.now() < until; i++) {
        const t0 = performance.now();
        await work(loop, i);
        latencies.push(performance.now() - t0);
      }
    }),
  );
  const elapsed = (performance.now() - started) / 1000;
  latencies.sort((a, b) => a - b);
  return { rps: latencies.length / elapsed, p50: percentile(latencies, 50), p99: percentile(latencies, 99) };
}

/** The ceiling names the statements the service names (database/prepared-statements.ts), unless told not to. */
const NAMED = process.env.DB_PREPARED_STATEMENTS !== 'false';
const statement = (sql: string, values?: unknown[]) => ({
  name: NAMED ? statementName(sql) : undefined,
  text: sql,
  values,
});

function manager(client: pg.Pool | pg.PoolClient): Queryable {
  if (client instanceof pg.Pool) {
    // pg's Pool.query destroys a client whose query failed (a new connection per expected unique violation);
    // the service's pool keeps it, so the ceiling does too.
    return {
      query: async (sql: string, params?: unknown[]) => {
        const pooled = await client.connect();
        try {
          return (await pooled.query(statement(sql, params))).rows;
        } finally {
          pooled.release();
        }
      },
    } as Queryable;
  }
  return {
    query: async (sql: string, params?: unknown[]) => (await client.query(statement(sql, params))).rows,
  } as Queryable;
}

async function transaction(pool: pg.Pool, work: (m: Queryable) => Promise<void>): Promise<void> {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    await work(manager(client));
    await client.query('COMMIT');
  } catch (error) {
    await client.query('ROLLBACK');
    throw error;
  } finally {
    client.release();
  }
}

async function load(
  url: string,
  seconds: number,
  request: { method: 'GET' | 'POST'; path: (i: number) => string; key?: (i: number) => string; body?: string },
  headers: Record<string, string>,
) {
  let i = 0;
  const result = await autocannon({
    url,
    connections,
    duration: seconds,
    requests: [
      {
        method: request.method,
        setupRequest: (req: autocannon.Request) => {
          const n = i++;
          const extra: Record<string, string> = request.key ? { 'idempotency-key': request.key(n) } : {};
          return {
            ...req,
            path: request.path(n),
            headers: { ...headers, ...extra },
            ...(request.body ? { body: request.body } : {}),
          };
        },
      },
    ],
  });
  return result;
}

/** pgbench's binary: on PATH, or in a Debian PostgreSQL's bin folder; undefined when there is none. */
function pgbenchBinary(): string | undefined {
  for (const candidate of [
    'pgbench',
    '/usr/lib/postgresql/18/bin/pgbench',
    '/usr/lib/postgresql/17/bin/pgbench',
    '/usr/lib/postgresql/16/bin/pgbench',
    '/usr/lib/postgresql/15/bin/pgbench',
  ]) {
    if (spawnSync(candidate, ['--version'], { encoding: 'utf8' }).status === 0) return candidate;
  }
  return undefined;
}

/**
 * PostgreSQL's own ceiling for one case: pgbench (C, prepared statements, or unnamed ones with `extended`) running
 * `script` (the statements of one request) at the same concurrency. No Node, no driver: what the database alone
 * can do here.
 */
function pgbenchCeiling(
  databaseUrl: string,
  script: string,
  seconds: number,
  mode: 'prepared' | 'extended' = 'prepared',
): { tps: number; latencyMs: number } | undefined {
  const binary = pgbenchBinary();
  if (!binary) return undefined;
  const file = join(mkdtempSync(join(tmpdir(), 'onejob-pgbench-')), 'case.sql');
  writeFileSync(file, script);
  const result = spawnSync(
    binary,
    [
      '-n',
      '-M',
      mode,
      '-c',
      String(connections),
      '-j',
      String(Math.min(connections, cpus().length)),
      '-T',
      String(seconds),
      '-f',
      file,
      databaseUrl,
    ],
    {
      encoding: 'utf8',
    },
  );
  const tps = /tps = ([\d.]+) \(without initial connection time\)/.exec(result.stdout);
  const latency = /latency average = ([\d.]+) ms/.exec(result.stdout);
  if (!tps) {
    process.stderr.write(`pgbench failed: ${result.stderr}\n`);
    return undefined;
  }
  return { tps: Number(tps[1]), latencyMs: Number(latency?.[1] ?? 0) };
}

const JOB_COLUMNS_SQL = `j.id, j.owner_id, j.idempotency_key, j.fingerprint, j.operation, j.input, j.providers, j.status, j.version,
  j.result, j.error, j.completed_by, j.created_at, j.updated_at, j.completed_at`;

/** The statements of one create, replay and get, as the repositories send them (docs/benchmarks.md). */
const PGBENCH_SCRIPTS = {
  create: `WITH j AS (
  INSERT INTO jobs (owner_id, idempotency_key, fingerprint, operation, input, providers)
  VALUES ('pgbench', gen_random_uuid()::text, repeat('f', 64), 'summarize', '{"text":"bench"}'::jsonb, '{bench-zero}')
  RETURNING *
), e AS (INSERT INTO job_events (job_id, subject, from_status, to_status, reason) SELECT id, 'job', NULL, 'pending', 'created' FROM j)
SELECT ${JOB_COLUMNS_SQL.replace(/\n/g, ' ')} FROM j;
`,
  get: `\\set n random(1, 1000)
SELECT ${JOB_COLUMNS_SQL.replace(/\n/g, ' ')}, COALESCE((SELECT json_agg(a ORDER BY a.number) FROM attempts a WHERE a.job_id = j.id), '[]'::json) AS attempts
  FROM jobs j WHERE j.id = (SELECT id FROM bench_ids WHERE n = :n) AND j.owner_id = (SELECT owner_id FROM bench_ids WHERE n = :n);
`,
  // A replay is the INSERT that collides, then the read by key (the failed INSERT is what pgbench cannot repeat
  // without aborting the client, so ON CONFLICT stands in for it: the same index probe, no row written).
  replay: `\\set n random(1, 1000)
INSERT INTO jobs (owner_id, idempotency_key, fingerprint, operation, input, providers)
  SELECT owner_id, idempotency_key, repeat('f', 64), 'summarize', '{"text":"seed"}'::jsonb, '{bench-zero}' FROM bench_ids WHERE n = :n
  ON CONFLICT ON CONSTRAINT "UQ_jobs_owner_idempotency_key" DO NOTHING;
SELECT ${JOB_COLUMNS_SQL.replace(/\n/g, ' ')}, COALESCE((SELECT json_agg(a ORDER BY a.number) FROM attempts a WHERE a.job_id = j.id), '[]'::json) AS attempts
  FROM jobs j WHERE (j.owner_id, j.idempotency_key) = (SELECT owner_id, idempotency_key FROM bench_ids WHERE n = :n);
`,
} as const;

function measure(result: autocannon.Result): Measure {
  return { rps: result.requests.average, p50: result.latency.p50, p99: result.latency.p99, non2xx: result.non2xx };
}

function peakRssMb(child: ChildProcess): number {
  const status = readFileSync(`/proc/${child.pid}/status`, 'utf8');
  return Number(/VmHWM:\s+(\d+)/.exec(status)![1]) / 1024;
}

function currentRssMb(child: ChildProcess): number {
  const status = readFileSync(`/proc/${child.pid}/status`, 'utf8');
  return Number(/VmRSS:\s+(\d+)/.exec(status)![1]) / 1024;
}

/** Service settings to try without editing the bench: DB_POOL_SIZE, WORKER_CONCURRENCY, WORKER_POLL_MS and DB_PREPARED_STATEMENTS pass through when set. */
function passThrough(): Record<string, string> {
  const env: Record<string, string> = {};
  for (const name of ['DB_POOL_SIZE', 'WORKER_CONCURRENCY', 'WORKER_POLL_MS', 'DB_PREPARED_STATEMENTS']) {
    if (process.env[name]) env[name] = process.env[name]!;
  }
  return env;
}

async function startService(
  databaseUrl: string,
  role: 'api' | 'worker' | 'all',
  extraEnv: Record<string, string> = {},
  script = join(args['service-dir']!, 'dist/src/main.js'),
): Promise<{ child: ChildProcess; url: string; stop: () => Promise<void> }> {
  const port = await freePort();
  // BENCH_CPU_PROF=1: a V8 CPU profile of the service per phase, in bench/profiles/ (open it in Chrome DevTools).
  const profile = process.env.BENCH_CPU_PROF ? ['--cpu-prof', '--cpu-prof-dir=bench/profiles'] : [];
  const child = spawn(process.execPath, [...profile, script], {
    cwd: args['service-dir'],
    env: {
      PATH: process.env.PATH ?? '',
      DATABASE_URL: databaseUrl,
      ROLE: role,
      PORT: String(port),
      HOST: '127.0.0.1',
      CATALOG_FILE: 'bench/catalog.bench.yaml',
      LOG_LEVEL: process.env.LOG_LEVEL ?? 'info',
      ...passThrough(),
      ...extraEnv,
    },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  const url = `http://127.0.0.1:${port}`;
  for (let tries = 0; ; tries++) {
    try {
      if ((await fetch(`${url}/health/ready`)).ok) break;
    } catch {
      // starting
    }
    // 60 s: on a 2-core machine that other work loads, a start (migrations, the catalog, the pool) can take 20 s.
    if (tries > 600) throw new Error('the service did not become ready');
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    child,
    url,
    stop: () =>
      new Promise((resolve) => {
        child.once('exit', () => resolve());
        child.kill('SIGTERM');
      }),
  };
}

/** A new API key of `owner` on that database (the apikey CLI prints it alone on its last line). */
function apiKey(databaseUrl: string, owner: string, scopes: string): string {
  return spawnSync(process.execPath, ['dist/src/auth/apikey.cli.js', 'create', '--owner', owner, '--scopes', scopes], {
    env: { PATH: process.env.PATH ?? '', DATABASE_URL: databaseUrl },
    encoding: 'utf8',
  })
    .stdout.trim()
    .split('\n')
    .pop()!;
}

async function main(): Promise<void> {
  // failover brings its own PostgreSQL (a pg_auto_failover formation per engine): run before, and alone if asked alone.
  let failover: FailoverRow[] | undefined;
  if (cases.includes('failover')) {
    failover = await failoverCase({ failovers: Number(args.failovers), run: Date.now().toString(36) });
    process.stdout.write(
      `\nfailover (pg_auto_failover, 2 nodes, synchronous; API + worker processes)\n\n${failoverTable(failover)}\n`,
    );
    if (cases.length === 1) {
      mkdirSync('bench/results', { recursive: true });
      const file = args.out ?? `bench/results/${new Date().toISOString().slice(0, 10)}-failover.json`;
      writeFileSync(
        file,
        `${JSON.stringify({ at: new Date().toISOString(), cores: cpus().length, failover }, null, 2)}\n`,
      );
      process.stdout.write(`\nwritten to ${file}\n`);
      return;
    }
  }
  // A database of its own: DATABASE_URL's server, or an embedded one in a temp folder.
  let adminUrl = process.env.DATABASE_URL;
  let stopEmbedded: (() => Promise<void>) | undefined;
  let embeddedDir: string | undefined;
  // PostgreSQL's CPU is read from /proc: only for the embedded server, whose postmaster we know.
  let postmaster: number | undefined;
  if (!adminUrl) {
    const dir = mkdtempSync(join(tmpdir(), 'onejob-bench-'));
    embeddedDir = dir;
    chmodSync(dir, 0o777);
    let embedded = await startEmbeddedPostgres({ dataDir: dir, database: 'postgres' });
    if (cases.includes('drain')) {
      // drain counts the statements each system sends per job: pg_stat_statements, loaded only at a start.
      const setup = new pg.Client({ connectionString: embedded.url });
      await setup.connect();
      await setup.query(`ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'`);
      await setup.end();
      await embedded.stop();
      embedded = await startEmbeddedPostgres({ dataDir: dir, database: 'postgres' });
    }
    adminUrl = embedded.url;
    stopEmbedded = embedded.stop;
    postmaster = postmasterPid(join(dir, 'pg'));
  }
  const pgCpu = () => (postmaster ? postgresCpuSeconds(postmaster) : 0);

  /** A case's floor: bench/floor.server.ts under the same load as the service. */
  const measureFloor = async (
    databaseUrl: string,
    request: Parameters<typeof load>[2],
    env: Record<string, string> = {},
  ): Promise<Row['floor']> => {
    const floorServer = await startService(databaseUrl, 'api', env, 'dist/bench/floor.server.js');
    try {
      const cpu0 = processCpuSeconds(floorServer.child.pid!);
      const pg0 = pgCpu();
      const result = await load(floorServer.url, duration, request, { 'content-type': 'application/json' });
      const per1000 = (seconds: number) => Math.round((seconds / result.requests.total) * 1000 * 1000) / 1000;
      return {
        ...measure(result),
        cpuPer1000: {
          process: per1000(processCpuSeconds(floorServer.child.pid!) - cpu0),
          postgres: postmaster ? per1000(pgCpu() - pg0) : null,
        },
      };
    } finally {
      await floorServer.stop();
    }
  };
  const dbName = `onejob_bench_${Date.now()}`;
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${dbName}`);
  const serverVersion = (await admin.query('SHOW server_version')).rows[0].server_version as string;
  // drain: the statements per job, where pg_stat_statements is loaded (the embedded server, above).
  const statements =
    cases.includes('drain') &&
    (await admin.query('CREATE EXTENSION IF NOT EXISTS pg_stat_statements').then(
      () => admin.query('SELECT 1 FROM pg_stat_statements LIMIT 1').then(() => true),
      () => false,
    ));
  const dbUrl = new URL(adminUrl);
  dbUrl.pathname = `/${dbName}`;
  const databaseUrl = dbUrl.toString();

  const rows: Row[] = [];
  const serviceCpu = new Map<Case, { service: number; postgres: number | null }>();
  let oneSecond: OneSecondRow[] = [];
  let capacity: CapacityRow | undefined;
  let fairness: FairnessRow | undefined;
  let batch: BatchRow | undefined;
  let batchAdmission: BatchAdmissionRow[] | undefined;
  let batchStreams: BatchStreamsRow[] | undefined;
  let resolution: ResolutionRow[] | undefined;
  let sse: SseRow | undefined;
  let claim: ClaimRow[] | undefined;
  let history: HistoryResult | undefined;
  let claimOwners: ClaimOwnersRow[] | undefined;
  let drainOwners: DrainOwnersRow[] | undefined;
  let drain: DrainRow[] | undefined;
  const pool = new pg.Pool({ connectionString: databaseUrl, max: connections });
  pool.on('error', () => undefined); // idle clients dropped by DROP DATABASE ... WITH (FORCE) at the end
  const jobs = new JobsRepository(pool as never);
  const attempts = new AttemptsRepository(pool as never);
  const settlements = new SettlementRepository();
  let soak: SoakResult | undefined;

  // create-jwt's issuer; every API process trusts it (a token that is not `oj_` is tried as its JWT).
  const issuer = await benchIssuer();
  try {
    let service = await startService(databaseUrl, 'api', { AUTH_ISSUERS_FILE: issuer.file });
    const key = apiKey(databaseUrl, 'bench', 'jobs:write,jobs:read');
    const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };
    const run = randomUUID().slice(0, 8);

    // Jobs to replay and read: made once through the API.
    const seeded: string[] = [];
    const seedKeys = Array.from({ length: 1000 }, (_, i) => `seed-${run}-${i}`);
    for (let i = 0; i < seedKeys.length; i += 50) {
      await Promise.all(
        seedKeys.slice(i, i + 50).map(async (k) => {
          const res = await fetch(`${service.url}/v1/jobs`, {
            method: 'POST',
            headers: { ...headers, 'idempotency-key': k },
            body: body('seed'),
          });
          seeded.push(((await res.json()) as { id: string }).id);
        }),
      );
    }
    const seededRows: Array<{ id: string; idempotency_key: string }> = (
      await pool.query('SELECT id, idempotency_key FROM jobs')
    ).rows;
    // pgbench picks seeded jobs by number.
    await pool.query(
      'CREATE TABLE bench_ids AS SELECT row_number() OVER (ORDER BY id)::int AS n, id, owner_id, idempotency_key FROM jobs',
    );
    await pool.query('CREATE UNIQUE INDEX ON bench_ids (n)');
    const fingerprintOfSeed = (await pool.query('SELECT fingerprint FROM jobs LIMIT 1')).rows[0].fingerprint as string;

    // A case named twice (`--cases create,create-jwt,create,create-jwt`, interleaved) makes new keys each time.
    let pass = 0;
    for (const name of cases) {
      pass++;
      if (
        name === 'pipeline' ||
        name === 'pipeline-1s' ||
        name === 'capacity' ||
        name === 'fairness' ||
        name === 'batch' ||
        name === 'batch-admission' ||
        name === 'batch-streams' ||
        name === 'resolution' ||
        name === 'sse' ||
        name === 'claim' ||
        name === 'history' ||
        name === 'retention' ||
        name === 'soak' ||
        name === 'failover' ||
        name === 'claim-owners' ||
        name === 'drain-owners' ||
        name === 'drain'
      ) {
        continue;
      }
      let serviceMeasure: Measure;
      let ceiling: Measure;
      let floor: Row['floor'];
      const svc = service;
      /** The service's load, with its CPU and PostgreSQL's per 1,000 requests. */
      const measuredLoad = async (request: Parameters<typeof load>[2], as = headers) => {
        const cpu0 = processCpuSeconds(svc.child.pid!);
        const pg0 = pgCpu();
        const result = await load(svc.url, duration, request, as);
        const per1000 = (seconds: number) => Math.round((seconds / result.requests.total) * 1000 * 1000) / 1000;
        serviceCpu.set(name, {
          service: per1000(processCpuSeconds(svc.child.pid!) - cpu0),
          postgres: postmaster ? per1000(pgCpu() - pg0) : null,
        });
        return result;
      };
      if (name === 'create' || name === 'create-jwt') {
        // create-jwt: the same creates with an RS256 JWT in place of the key, verified once (then cached until it
        // expires, 60 s at most) after one JWKS fetch made before the measured run.
        const as = name === 'create' ? headers : { ...headers, authorization: `Bearer ${issuer.token}` };
        if (name === 'create-jwt') await fetch(`${svc.url}/v1/jobs?limit=1`, { headers: as });
        serviceMeasure = measure(
          await measuredLoad(
            {
              method: 'POST',
              path: () => '/v1/jobs',
              key: (i) => `${name}-${run}-${pass}-${i}`,
              body: body('bench'),
            },
            as,
          ),
        );
        ceiling = await closedLoop(duration, (loop, i) =>
          jobs
            .insertJob(
              {
                ownerId: 'bench-ceiling',
                idempotencyKey: `c-${run}-${pass}-${loop}-${i}`,
                fingerprint: 'f'.repeat(64),
                ...NEW_JOB,
              },
              manager(pool),
            )
            .then(() => undefined),
        );
        if (name === 'create') {
          floor = await measureFloor(databaseUrl, {
            method: 'POST',
            path: () => '/v1/jobs',
            key: (i) => `floor-${run}-${pass}-${i}`,
            body: body('bench'),
          });
        }
      } else if (name === 'replay' || name === 'storm') {
        const keys = name === 'replay' ? seedKeys : seedKeys.slice(0, 10);
        const result = await measuredLoad({
          method: 'POST',
          path: () => '/v1/jobs',
          key: (i) => keys[i % keys.length],
          body: body('seed'),
        });
        serviceMeasure = { ...measure(result), designed: '200 replays' };
        const ceilingKeys =
          name === 'replay'
            ? seededRows.map((r) => r.idempotency_key)
            : seededRows.slice(0, 10).map((r) => r.idempotency_key);
        const owner = (await pool.query('SELECT owner_id FROM jobs LIMIT 1')).rows[0].owner_id as string;
        ceiling = await closedLoop(duration, async (loop, i) => {
          const k = ceilingKeys[(loop * 7919 + i) % ceilingKeys.length];
          try {
            await jobs.insertJob(
              { ownerId: owner, idempotencyKey: k, fingerprint: fingerprintOfSeed, ...NEW_JOB },
              manager(pool),
            );
          } catch (error) {
            if (!(error instanceof DuplicateIdempotencyKeyError)) throw error;
            await jobs.findOwnedByKey(owner, k, manager(pool));
          }
        });
      } else {
        serviceMeasure = measure(
          await measuredLoad({ method: 'GET', path: (i) => `/v1/jobs/${seeded[i % seeded.length]}` }),
        );
        const owner = (await pool.query('SELECT owner_id FROM jobs LIMIT 1')).rows[0].owner_id as string;
        ceiling = await closedLoop(duration, (loop, i) =>
          jobs.findOwnedById(owner, seeded[(loop * 7919 + i) % seeded.length], manager(pool)).then(() => undefined),
        );
        floor = await measureFloor(
          databaseUrl,
          { method: 'GET', path: (i) => `/v1/jobs/${seeded[i % seeded.length]}` },
          { FLOOR_OWNER: owner },
        );
      }
      const script = name === 'create' || name === 'replay' || name === 'get' ? PGBENCH_SCRIPTS[name] : undefined;
      const postgres = script ? pgbenchCeiling(databaseUrl, script, duration) : undefined;
      const postgresUnnamed = script ? pgbenchCeiling(databaseUrl, script, duration, 'extended') : undefined;
      rows.push({
        case: name,
        service: serviceMeasure,
        ceiling,
        ratio: serviceMeasure.rps / ceiling.rps,
        postgres,
        postgresUnnamed,
        floor,
        cpuPer1000: serviceCpu.get(name),
        peakRssMb: peakRssMb(service.child),
      });
    }
    if (cases.includes('batch')) batch = await batchCase({ pool, databaseUrl, run, headers, service });
    const apiPeak = peakRssMb(service.child);
    await service.stop();

    if (cases.includes('batch-admission')) {
      batchAdmission = await batchAdmissionCase({
        run,
        seconds: duration,
        createKey: (owner) => apiKey(databaseUrl, owner, 'jobs:write,jobs:read'),
        startService: (extraEnv) => startService(databaseUrl, 'api', extraEnv),
      });
    }

    if (cases.includes('batch-streams')) {
      batchStreams = await batchStreamsCase({
        pool,
        run,
        headers,
        createKey: (owner) => apiKey(databaseUrl, owner, 'jobs:write,jobs:read'),
        startService: (role, extraEnv) => startService(databaseUrl, role, extraEnv),
        processCpuSeconds,
        postgresCpuSeconds: () => (postmaster ? pgCpu() : undefined),
      });
    }

    if (cases.includes('pipeline')) {
      // Workers on: jobs created and settled per second, end to end.
      await pool.query('UPDATE jobs SET next_attempt_at = NULL');
      service = await startService(databaseUrl, 'all');
      const started = Date.now();
      const cpu0 = processCpuSeconds(service.child.pid!);
      const pg0 = pgCpu();
      const result = await load(
        service.url,
        duration,
        { method: 'POST', path: () => '/v1/jobs', key: (i) => `pipe-${run}-${i}`, body: body('pipeline') },
        headers,
      );
      const created = result['2xx'];
      let settled = 0;
      while (Date.now() - started < (duration + 60) * 1000) {
        settled = (
          await pool.query(
            `SELECT count(*)::int AS n FROM jobs WHERE idempotency_key LIKE $1 AND status = 'succeeded'`,
            [`pipe-${run}-%`],
          )
        ).rows[0].n;
        if (settled >= created) break;
        await new Promise((r) => setTimeout(r, 50));
      }
      const lastSettled = (
        await pool.query(`SELECT max(completed_at) AS at FROM jobs WHERE idempotency_key LIKE $1`, [`pipe-${run}-%`])
      ).rows[0].at as Date;
      const seconds = (lastSettled.getTime() - started) / 1000;
      // p50/p99 are the creates' (ROLE=all, workers running them as they come): the create case as shipped.
      const serviceMeasure: Measure = {
        rps: settled / seconds,
        p50: result.latency.p50,
        p99: result.latency.p99,
        non2xx: result.non2xx,
        designed: `creates ${Math.round(result.requests.average)}/s with ROLE=all`,
      };
      const per1000 = (cpu: number) => Math.round((cpu / Math.max(1, settled)) * 1000 * 1000) / 1000;
      serviceCpu.set('pipeline', {
        service: per1000(processCpuSeconds(service.child.pid!) - cpu0),
        postgres: postmaster ? per1000(pgCpu() - pg0) : null,
      });

      // The same SQL as create, claim, mark running and settle, one job per cycle, through pg.
      const ceiling = await closedLoop(duration, async (loop, i) => {
        await jobs.insertJob(
          {
            ownerId: 'bench-ceiling',
            idempotencyKey: `p-${run}-${loop}-${i}`,
            fingerprint: 'f'.repeat(64),
            ...NEW_JOB,
          },
          manager(pool),
        );
        let claimed: { jobId: string; attemptId: string } | undefined;
        await transaction(pool, async (m) => {
          const [job] = (await jobs.claimDue(1, { providers: [], rooms: [] }, m)).jobs;
          if (!job) return;
          const [attempt] = await attempts.insertClaimed(
            [
              {
                jobId: job.id,
                provider: 'bench-zero',
                jobVersion: job.version,
                timeoutMs: 5000,
                hardTimeoutMs: 10000,
                workerId: 'bench',
                jobFrom: job.status,
              },
            ],
            m,
          );
          claimed = { jobId: job.id, attemptId: attempt.id };
        });
        if (!claimed) return;
        const c = claimed;
        await attempts.markRunning([{ id: c.attemptId, timeoutMs: 5000, hardTimeoutMs: 10000 }], manager(pool));
        await settlements.settleResult(
          {
            jobId: c.jobId,
            attemptId: c.attemptId,
            eligibleFrom: ['starting', 'running', 'unknown', 'cancelled'],
            value: { summary: 'x' },
            usage: { promptTokens: 1, completionTokens: 1 },
            providerRequestId: null,
            resultDigest: 'd'.repeat(64),
          },
          manager(pool),
        );
      });
      rows.push({
        case: 'pipeline',
        service: serviceMeasure,
        ceiling,
        ratio: serviceMeasure.rps / ceiling.rps,
        cpuPer1000: serviceCpu.get('pipeline'),
        peakRssMb: peakRssMb(service.child),
      });

      await service.stop();
    }
    void apiPeak;

    if (cases.includes('pipeline-1s')) {
      oneSecond = await pipelineOneSecond({
        pool,
        databaseUrl,
        run,
        headers,
        postmaster,
        startService: (extraEnv) => startService(databaseUrl, 'all', extraEnv),
        peakRssMb,
      });
    }

    if (cases.includes('capacity')) {
      capacity = await capacityCase({
        pool,
        run,
        headers,
        startService: (role, extraEnv) => startService(databaseUrl, role, extraEnv),
      });
    }

    if (cases.includes('fairness')) {
      const createKey = (owner: string, scopes: string) => apiKey(databaseUrl, owner, scopes);
      fairness = await fairnessCase({
        pool,
        run,
        createKey,
        startService: (role, extraEnv) => startService(databaseUrl, role, extraEnv),
      });
    }

    if (cases.includes('resolution')) {
      resolution = await resolutionCase({
        pool,
        run,
        headers,
        databaseUrl,
        startService: (extraEnv) => startService(databaseUrl, 'all', extraEnv),
      });
    }

    if (cases.includes('sse')) {
      const startSse = (role: 'api' | 'worker', extraEnv: Record<string, string>) =>
        startService(databaseUrl, role, extraEnv);
      sse = await sseCase({ pool, databaseUrl, run, headers, startService: startSse, rssMb: currentRssMb });
    }
    if (cases.includes('claim')) claim = await claimCase(pool);
    if (cases.includes('soak')) {
      // A database of its own: its tables' sizes are the soak's alone.
      const soakDb = new URL(databaseUrl);
      soakDb.pathname = `/${dbName}_soak`;
      await admin.query(`CREATE DATABASE ${dbName}_soak`);
      try {
        soak = await soakCase({
          databaseUrl: soakDb.toString(),
          minutes: Number(args['soak-minutes']),
          retentionMinutes: Number(args['soak-retention-minutes']),
          run,
          createKey: () => apiKey(soakDb.toString(), 'bench', 'jobs:write,jobs:read'),
          startService: (role, extraEnv) => startService(soakDb.toString(), role, extraEnv),
          log: (line) => process.stderr.write(`${line}\n`),
        });
      } finally {
        await admin.query(`DROP DATABASE IF EXISTS ${dbName}_soak WITH (FORCE)`);
      }
    }
    if (cases.includes('claim-owners') || cases.includes('drain-owners') || cases.includes('drain')) {
      const ownersContext = {
        admin,
        serverUrl: adminUrl,
        run,
        startService,
        log: (line: string) => process.stderr.write(`${line}\n`),
        postgresCpuSeconds: postmaster ? pgCpu : undefined,
        statements,
      };
      if (cases.includes('claim-owners')) claimOwners = await claimOwnersCase(ownersContext);
      if (cases.includes('drain-owners')) drainOwners = await drainOwnersCase(ownersContext);
      if (cases.includes('drain')) drain = await drainCase(ownersContext);
    }
    if (cases.includes('history') || cases.includes('retention')) {
      history = await historyCase(
        {
          admin,
          serverUrl: adminUrl,
          historyJobs: Number(args['history-jobs']),
          duration,
          connections,
          run,
          startService,
          createKey: (url, owner, scopes) => apiKey(url, owner, scopes),
          log: (line) => process.stderr.write(`${line}\n`),
        },
        { history: cases.includes('history'), retention: cases.includes('retention') },
      );
    }
  } finally {
    await issuer.stop();
    await pool.end();
    await admin.query(`DROP DATABASE IF EXISTS ${dbName} WITH (FORCE)`);
    await admin.end();
    await stopEmbedded?.();
    // The history case leaves tens of GB there: the folder goes with the server.
    if (embeddedDir) rmSync(embeddedDir, { recursive: true, force: true });
  }

  const fmt = (n: number, digits = 0) => n.toFixed(digits);
  const create = rows.find((r) => r.case === 'create');
  const table = [
    '| case | service req/s | p50 ms | p99 ms | `pg` ceiling req/s | ratio | PostgreSQL alone tps | ratio | unnamed statements tps | ratio | CPU s/1000 service + PostgreSQL | non-2xx | peak RSS MB |',
    '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
    ...rows.map(
      (r) =>
        `| ${r.case} | ${fmt(r.service.rps)} | ${fmt(r.service.p50, 1)} | ${fmt(r.service.p99, 1)} | ${fmt(r.ceiling.rps)} | ${fmt(r.ratio * 100)}% | ${r.postgres ? fmt(r.postgres.tps) : r.case === 'pipeline' && create ? `create: ${fmt(create.service.rps)}` : ''} | ${r.postgres ? `${fmt((r.service.rps / r.postgres.tps) * 100)}%` : r.case === 'pipeline' && create ? `${fmt((r.service.rps / create.service.rps) * 100)}% of create` : ''} | ${r.postgresUnnamed ? fmt(r.postgresUnnamed.tps) : ''} | ${r.postgresUnnamed ? `${fmt((r.service.rps / r.postgresUnnamed.tps) * 100)}%` : ''} | ${r.cpuPer1000 ? `${r.cpuPer1000.service} + ${r.cpuPer1000.postgres ?? 'n/a'}` : ''} | ${r.service.non2xx ?? 0}${r.service.designed ? ` (${r.service.designed})` : ''} | ${fmt(r.peakRssMb)} |`,
    ),
  ].join('\n');
  const header = `onejob bench: ${connections} connections, ${duration} s per case, ${cpus().length} cores, Node ${process.version}, PostgreSQL ${serverVersion}, hot statements ${NAMED ? 'named' : 'unnamed'}`;
  process.stdout.write(`\n${header}\n${rows.length ? `\n${table}\n` : ''}`);
  for (const r of rows) {
    if (!r.floor) continue;
    const what = r.case === 'create' ? 'the INSERT' : 'the SELECT';
    process.stdout.write(
      `\nfloor of ${r.case} (bench/floor.server.ts: Fastify + pg and ${what}, nothing else; statements ${NAMED ? 'named' : 'unnamed'}): ` +
        `${fmt(r.floor.rps)} req/s, p99 ${fmt(r.floor.p99, 1)} ms, CPU s/1000 ${r.floor.cpuPer1000.process} + ${r.floor.cpuPer1000.postgres ?? 'n/a'}; ` +
        `service = ${fmt((r.service.rps / r.floor.rps) * 100)}% of the floor` +
        (r.postgres && r.postgresUnnamed
          ? `; floor = ${fmt((r.floor.rps / r.postgres.tps) * 100)}% of PostgreSQL alone (prepared), ${fmt((r.floor.rps / r.postgresUnnamed.tps) * 100)}% (unnamed)\n`
          : '\n'),
    );
  }
  const withJwt = rows.find((r) => r.case === 'create-jwt');
  if (withJwt) {
    process.stdout.write(
      `\ncreate-jwt (RS256 JWT of a local issuer, one token, keys fetched ${issuer.jwksRequests()} time(s)): ` +
        `${fmt(withJwt.service.rps)} req/s, p99 ${fmt(withJwt.service.p99, 1)} ms` +
        (create ? `; ${fmt((withJwt.service.rps / create.service.rps) * 100)}% of create with a key\n` : '\n'),
    );
  }
  if (oneSecond.length) {
    process.stdout.write(
      `\npipeline-1s (simulated provider, 1 s latency; pg-boss 10 on the same PostgreSQL)\n\n${oneSecondTable(oneSecond)}\n`,
    );
  }
  if (capacity) {
    process.stdout.write(
      `\ncapacity (fake OpenAI server, 1 s latency, maxConcurrency 50, 3 worker processes + 1 API process)\n\n${capacityTable(capacity)}\n`,
    );
  }
  if (fairness) {
    process.stdout.write(
      `\nfairness (fake OpenAI server, 1 s latency, maxConcurrency 5, 3 worker processes + 1 API process)\n\n${fairnessTable(fairness)}\n`,
    );
  }
  if (batch) process.stdout.write(`\nbatch (ROLE=api, same run, same PostgreSQL)\n\n${batchTable(batch)}\n`);
  if (batchAdmission) {
    const what = `one ROLE=api process; 12 owners × 2 senders of 10,000-item batches; another owner's creates, 4 loops`;
    process.stdout.write(`\nbatch-admission (${what})\n\n${batchAdmissionTable(batchAdmission)}\n`);
  }
  if (batchStreams) {
    const what = `one ROLE=api process serves the streams, a ROLE=worker settles a 10,000-item batch; another owner's creates, 4 loops`;
    process.stdout.write(`\nbatch-streams (${what})\n\n${batchStreamsTable(batchStreams)}\n`);
  }
  if (resolution) {
    const what =
      'OpenAI Responses in background mode (fake), timeout 1 s, answers at 3 s, RECONCILE_INTERVAL_MS 500, one ROLE=all process';
    process.stdout.write(`\nresolution (${what})\n\n${resolutionTable(resolution)}\n`);
  }
  if (sse) {
    const what = 'ROLE=api streams, ROLE=worker commits on bench-1s; then 1,000 idle streams in one API process';
    process.stdout.write(`\nsse (${what})\n\n${sseTable(sse)}\n`);
  }
  if (claim) {
    const what = "the claim's first statement alone on 100,000 due jobs, 290 measured runs each, interleaved";
    process.stdout.write(`\nclaim (${what})\n\n${claimTable(claim)}\n`);
  }
  if (claimOwners) {
    const what = 'the fair claim, window 64, no waiting sets, in a rolled-back transaction, p50 of 7 runs';
    process.stdout.write(`\nclaim-owners (${what})\n\n${claimOwnersTable(claimOwners)}\n`);
  }
  if (drainOwners) {
    const what = 'one ROLE=worker process, default concurrency, bench-zero (answers at once)';
    process.stdout.write(`\ndrain-owners (${what})\n\n${drainOwnersTable(drainOwners)}\n`);
  }
  if (drain) {
    const what = `100,000 due jobs, one process each, same PostgreSQL; onejob on bench-zero, the peers' handlers no-ops; statements${statements ? '' : ' n/a (no pg_stat_statements)'} those the client sent, less BEGIN/COMMIT`;
    process.stdout.write(`\ndrain (${what})\n\n${drainTable(drain)}\n`);
    const top = drainStatements(drain);
    const heading =
      'drain: the statements with the most server time, and the frequent ones (share of the time, calls per job, mean)';
    if (top) process.stdout.write(`\n${heading}\n\n${top}\n`);
  }
  if (history?.rows.length) {
    const what = `10,000 creates (ROLE=api, ${connections} connections), the claim of 64 alone, the drain and the pipeline (ROLE=all, ${duration} s)`;
    process.stdout.write(`\nhistory (${what})\n\n${historyTable(history)}\n`);
  }
  if (history?.retention) {
    const what = 'creates at 200/s over HTTP, ROLE=api + ROLE=worker; then a worker purging the oldest day';
    process.stdout.write(`\nretention (${what})\n\n${retentionTable(history.retention)}\n`);
  }
  mkdirSync('bench/results', { recursive: true });
  const file = args.out ?? `bench/results/${new Date().toISOString().slice(0, 10)}.json`;
  if (soak) {
    const what = `${soak.rate} creates/s, bench-1s (1 s), ROLE=api + ROLE=worker, retention ${soak.retentionMinutes} min swept every 30 s`;
    process.stdout.write(`\nsoak (${what})\n\n${soakTable(soak)}\n`);
    const png = file.replace(/\.json$/, '') + '-soak.png';
    await soakPlot(soak, png).then(
      () => process.stdout.write(`\nsoak plot: ${png}\n`),
      (error: Error) => process.stdout.write(`\nsoak plot not drawn: ${error.message}\n`),
    );
  }
  writeFileSync(
    file,
    `${JSON.stringify({ at: new Date().toISOString(), connections, duration, cores: cpus().length, node: process.version, postgres: serverVersion, rows, oneSecond, capacity, fairness, batch, batchAdmission, batchStreams, resolution, sse, claim, claimOwners, drainOwners, drain, history, failover, soak }, null, 2)}\n`,
  );
  process.stdout.write(`\nwritten to ${file}\n`);
}

main().catch((error: Error) => {
  process.stderr.write(`bench failed: ${error.stack}\n`);
  process.exit(1);
});
