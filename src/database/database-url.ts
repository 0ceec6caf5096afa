import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

import pg from 'pg';

import type { Env } from '../config/env.js';
import { type EmbeddedDatabase, startEmbeddedPostgres } from './embedded-postgres.js';

const RUNNING_FILE = 'embedded.json';

/** Lets CLIs (apikey, migration:run, certify) reach the embedded database a running service started. */
export function recordRunningEmbedded(dataDir: string, url: string): () => void {
  const file = join(dataDir, RUNNING_FILE);
  writeFileSync(file, JSON.stringify({ url, pid: process.pid }), { mode: 0o600 });
  return () => rmSync(file, { force: true });
}

async function reachable(url: string): Promise<boolean> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 1000 });
  try {
    await client.connect();
    return true;
  } catch {
    return false;
  } finally {
    await client.end().catch(() => undefined);
  }
}

/**
 * The database a CLI should use: DATABASE_URL when set; else the embedded server a running service started;
 * else an embedded server of its own in DATA_DIR (stopped by the returned `stop`).
 */
export async function resolveDatabase(
  env: Pick<Env, 'databaseUrl' | 'dataDir'>,
): Promise<{ url: string; stop: () => Promise<void>; embedded?: EmbeddedDatabase }> {
  if (env.databaseUrl) return { url: env.databaseUrl, stop: async () => undefined };
  const file = join(env.dataDir, RUNNING_FILE);
  if (existsSync(file)) {
    const { url } = JSON.parse(readFileSync(file, 'utf8')) as { url: string };
    if (await reachable(url)) return { url, stop: async () => undefined };
  }
  const embedded = await startEmbeddedPostgres({ dataDir: env.dataDir, database: 'onejob' });
  return { url: embedded.url, stop: () => embedded.stop(), embedded };
}
