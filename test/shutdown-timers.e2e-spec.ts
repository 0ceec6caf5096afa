import { spawn } from 'node:child_process';
import { once } from 'node:events';

import { provider, writeCatalog } from './helpers/catalog.js';
import { createTestDatabase, type TestDatabase } from './helpers/database.js';

/**
 * Closing the app leaves nothing that holds the process: jest's "a worker process has failed to exit gracefully"
 * came from the worker's (and the webhook dispatcher's) shutdown grace, whose timer outlived a drain that ended
 * early by up to SHUTDOWN_GRACE_MS. Runs the built app in a process of its own (test/fixtures/close-after-drain.mjs).
 */
describe('shutdown', () => {
  let database: TestDatabase;

  beforeAll(async () => {
    database = await createTestDatabase();
  });
  afterAll(() => database.drop());

  it('lets the process end by itself once app.close() has drained an attempt in flight, long before the grace', async () => {
    const catalogFile = writeCatalog((c) => (provider(c, 'sim-primary').simulate.latencyMs = 800));
    const child = spawn(process.execPath, ['test/fixtures/close-after-drain.mjs'], {
      env: { PATH: process.env.PATH ?? '', DATABASE_URL: database.url, CATALOG_FILE: catalogFile },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    let closedAt = 0;
    child.stdout.on('data', (chunk: Buffer) => {
      output += chunk.toString();
      if (!closedAt && output.includes('closed')) closedAt = Date.now();
    });
    child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    const exited = once(child, 'exit');
    // The grace is 60 s: a timer left behind keeps the process far past this bound.
    const killer = setTimeout(() => child.kill('SIGKILL'), 25_000);
    const [code, signal] = await exited;
    clearTimeout(killer);
    expect({ code, signal, closed: closedAt > 0 }).toEqual({ code: 0, signal: null, closed: true });
    expect(Date.now() - closedAt).toBeLessThan(10_000);
  }, 40_000);
});
