import { spawnSync } from 'node:child_process';

import { createTestDatabase, type TestDatabase } from '../helpers/database.js';
import { type ServiceProcess, spawnService, waitUntilReady } from '../helpers/process.js';

/**
 * Where the race suite aims: a deployment named by E2E_BASE_URL (comma-separated for several replicas) with
 * E2E_API_KEY, E2E_OPERATOR_KEY (same owner; attempts:resolve and providers:certify) and E2E_OTHER_API_KEY
 * (another owner, without operator scopes); or, with no URL, the service started here as separate OS processes on a real PostgreSQL.
 */
export interface RaceTarget {
  mode: 'url' | 'in-process';
  urls: string[];
  keys: { owner: string; operator: string; other?: string };
  /** In-process only: the processes and the database, for the fault cases. */
  local?: { database: TestDatabase; apis: ServiceProcess[]; worker: ServiceProcess; env: Record<string, string> };
  close(): Promise<void>;
}

/** The larger counts of `npm run test:race`; `npm test` runs the same cases smaller. */
export const FULL = process.env.RACE_FULL === '1';
export const urlMode = Boolean(process.env.E2E_BASE_URL);

const LOCAL_ONLY = 'skipped in URL mode (E2E_BASE_URL): needs a database and processes of its own';

/**
 * A describe block that kills, freezes or reads the service's processes and database: against a deployment
 * (URL mode) there are none to reach, so it is skipped, and its name says why in the report.
 */
export function describeLocal(name: string, body: () => void): void {
  if (!urlMode) return describe(name, body);
  // Jest lists no names for a file whose every case is skipped: the reason is printed as well.
  console.warn(`${name}: ${LOCAL_ONLY}`);
  describe.skip(`${name} [${LOCAL_ONLY}]`, body);
}

export const RACE_CATALOG = 'config/catalog.race.yaml';

export function createKey(
  databaseUrl: string,
  owner: string,
  scopes: string,
  env: Record<string, string> = {},
): string {
  const result = spawnSync(
    process.execPath,
    ['dist/src/auth/apikey.cli.js', 'create', '--owner', owner, '--scopes', scopes],
    {
      env: { PATH: process.env.PATH ?? '', DATABASE_URL: databaseUrl, ...env },
      // A CLI waiting on a migration lock nobody will release must fail the test, not hang the jest worker.
      timeout: 60_000,
      encoding: 'utf8',
    },
  );
  if (result.status !== 0) {
    throw new Error(`apikey failed (${result.signal ?? `exit ${result.status}`}): ${result.stderr}`);
  }
  return result.stdout.trim().split('\n').pop()!;
}

export async function raceTarget(options: { replicas?: number } = {}): Promise<RaceTarget> {
  if (urlMode) {
    const owner = process.env.E2E_API_KEY;
    const operator = process.env.E2E_OPERATOR_KEY;
    if (!owner || !operator) throw new Error('URL mode needs E2E_API_KEY and E2E_OPERATOR_KEY (docs/testing.md)');
    return {
      mode: 'url',
      urls: process.env.E2E_BASE_URL!.split(',').map((u) => u.trim().replace(/\/$/, '')),
      keys: { owner, operator, other: process.env.E2E_OTHER_API_KEY },
      close: async () => undefined,
    };
  }
  const database = await createTestDatabase();
  const env = {
    DATABASE_URL: database.url,
    CATALOG_FILE: RACE_CATALOG,
    WORKER_POLL_MS: '20',
    RECONCILE_INTERVAL_MS: '100',
  };
  const started: ServiceProcess[] = [];
  const start = async (role: 'api' | 'worker') => {
    const service = await spawnService({ ...env, ROLE: role });
    started.push(service);
    return service;
  };
  let first: ServiceProcess, others: ServiceProcess[], worker: ServiceProcess;
  try {
    // The first process applies the migrations; the others start once it is ready.
    first = await start('api');
    await waitUntilReady(first);
    others = await Promise.all(Array.from({ length: (options.replicas ?? 1) - 1 }, () => start('api')));
    worker = await start('worker');
    await Promise.all([...others, worker].map((p) => waitUntilReady(p)));
  } catch (error) {
    // A start that failed leaves no process behind: the suite's close never runs, and jest would wait on them.
    for (const p of started) if (p.child.exitCode === null && p.child.signalCode === null) p.kill('SIGKILL');
    await Promise.all(started.map((p) => p.exited));
    await database.drop();
    throw error;
  }
  const apis = [first, ...others];
  return {
    mode: 'in-process',
    urls: apis.map((p) => p.baseUrl),
    keys: {
      owner: createKey(database.url, 'race-a', 'jobs:write,jobs:read'),
      operator: createKey(database.url, 'race-a', 'jobs:write,jobs:read,attempts:resolve,providers:certify'),
      other: createKey(database.url, 'race-b', 'jobs:write,jobs:read'),
    },
    local: { database, apis, worker, env },
    close: async () => {
      for (const p of [...apis, worker]) {
        if (p.child.exitCode === null && p.child.signalCode === null) p.kill('SIGTERM');
        await p.exited;
      }
      await database.drop();
    },
  };
}

export interface Answer {
  status: number;
  headers: Headers;
  body: any;
}

/** A tiny black-box client: only the public API. */
export function client(target: RaceTarget, key: string, replica = 0) {
  const base = () => target.urls[replica % target.urls.length];
  const call = async (
    method: string,
    path: string,
    init: { body?: unknown; headers?: Record<string, string>; raw?: string } = {},
    url = base(),
  ): Promise<Answer> => {
    const headers: Record<string, string> = { authorization: `Bearer ${key}`, ...init.headers };
    let body: string | undefined = init.raw;
    if (init.body !== undefined) {
      body = JSON.stringify(init.body);
      headers['content-type'] ??= 'application/json';
    }
    const res = await fetch(`${url}${path}`, { method, headers, body });
    const text = await res.text();
    let parsed: unknown = text;
    try {
      parsed = text ? JSON.parse(text) : null;
    } catch {
      // not JSON: kept as text
    }
    return { status: res.status, headers: res.headers, body: parsed };
  };
  return {
    call,
    at: (replicaIndex: number) => client(target, key, replicaIndex),
    create: (idempotencyKey: string, body: unknown, headers: Record<string, string> = {}) =>
      call('POST', '/v1/jobs', { body, headers: { 'idempotency-key': idempotencyKey, ...headers } }),
    job: (id: string) => call('GET', `/v1/jobs/${id}`),
    until: async (id: string, done: (job: any) => boolean, timeoutMs = 15_000) => {
      const until = Date.now() + timeoutMs;
      for (;;) {
        const { body } = await call('GET', `/v1/jobs/${id}`);
        if (done(body)) return body;
        if (Date.now() > until) {
          throw new Error(`job ${id} did not reach the state in ${timeoutMs} ms: ${JSON.stringify(body)}`);
        }
        await new Promise((r) => setTimeout(r, 50));
      }
    },
  };
}

/** A run-unique prefix, so URL mode can run the suite again against the same deployment. */
export const RUN = `${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`;

/** The owner's jobs whose idempotency key starts with `prefix`, read through the API's keyset pages. */
export async function jobsWithKeyPrefix(
  owner: ReturnType<typeof client>,
  prefix: string,
): Promise<Array<{ id: string; idempotencyKey: string }>> {
  const found: Array<{ id: string; idempotencyKey: string }> = [];
  let cursor: string | null = null;
  do {
    const page = await owner.call('GET', `/v1/jobs?limit=100${cursor ? `&cursor=${cursor}` : ''}`);
    found.push(...page.body.items.filter((j: { idempotencyKey: string }) => j.idempotencyKey.startsWith(prefix)));
    cursor = page.body.nextCursor;
  } while (cursor);
  return found;
}
