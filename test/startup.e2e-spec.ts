import { chmodSync, existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { readFileSync } from 'node:fs';
import { parse, stringify } from 'yaml';
import { createTestDatabase, type TestDatabase } from './helpers/database.js';
import { spawnService, waitUntilReady } from './helpers/process.js';

function badCatalog(mutate: (catalog: any) => void): string {
  const catalog = parse(readFileSync('config/catalog.yaml', 'utf8'));
  mutate(catalog);
  const file = join(mkdtempSync(join(tmpdir(), 'onejob-catalog-')), 'catalog.yaml');
  writeFileSync(file, stringify(catalog));
  return file;
}

describe('start-up refuses a bad configuration, naming it', () => {
  let db: TestDatabase;

  beforeAll(async () => {
    db = await createTestDatabase();
  });
  afterAll(() => db.drop());

  it.each([
    ['PORT', { PORT: 'eighty' }, 'Invalid environment variable PORT'],
    ['ROLE', { ROLE: 'boss' }, 'Invalid environment variable ROLE'],
    ['WORKER_CONCURRENCY', { WORKER_CONCURRENCY: '-3' }, 'Invalid environment variable WORKER_CONCURRENCY'],
    ['DATABASE_URL', { DATABASE_URL: 'mysql://secret-password@host/db' }, 'Invalid environment variable DATABASE_URL'],
  ])('exits 1 on a bad %s and names it without echoing its value', async (_name, env, message) => {
    const service = await spawnService({ DATABASE_URL: db.url, ...env });
    const { code } = await service.exited;
    expect(code).toBe(1);
    expect(service.output()).toContain(message);
    for (const value of Object.values(env)) expect(service.output()).not.toContain(value);
  });

  it.each([
    ['a missing timeoutMs', (c: any) => delete c.providers[0].timeoutMs, 'providers[0].timeoutMs is required'],
    ['an unknown provider kind', (c: any) => (c.providers[1].kind = 'magic'), 'providers[1].kind'],
    ['failover on a provider with side effects', (c: any) => (c.providers[2].sideEffectFree = false), 'providers[2].onTimeout'],
    ['an operation chain naming no provider', (c: any) => (c.operations[0].providers = ['sim-primary', 'ghost']), 'operations[0].providers[1]'],
    ['an invalid input schema', (c: any) => (c.operations[1].inputSchema = { type: 'banana' }), 'operations[1].inputSchema'],
  ])('exits 1 on a catalog with %s, naming the field', async (_name, mutate, field) => {
    const service = await spawnService({ DATABASE_URL: db.url, CATALOG_FILE: badCatalog(mutate) });
    const { code } = await service.exited;
    expect(code).toBe(1);
    expect(service.output()).toContain(`Invalid catalog: ${field}`);
  });

  it('serves health and Swagger once the configuration is good', async () => {
    const service = await spawnService({ DATABASE_URL: db.url });
    try {
      await waitUntilReady(service);
      const docs = await fetch(`${service.baseUrl}/docs-json`);
      expect(docs.status).toBe(200);
      const document = (await docs.json()) as { paths: Record<string, unknown> };
      expect(Object.keys(document.paths)).toContain('/v1/jobs');
      const ui = await fetch(`${service.baseUrl}/docs`);
      expect(ui.status).toBe(200);
      expect(await ui.text()).toContain('swagger');
    } finally {
      service.kill('SIGTERM');
      await service.exited;
    }
  });
});

describe('the README start command: embedded PostgreSQL when DATABASE_URL is unset', () => {
  it('prints a demo key, drains an in-flight attempt on SIGTERM before stopping the database, exits 0, and keeps the result', async () => {
    // As root the embedded server runs as `postgres`, which must be able to write the folder.
    const dataDir = mkdtempSync(join(tmpdir(), 'onejob-embedded-'));
    chmodSync(dataDir, 0o777);
    const catalog = badCatalog((c) => (c.providers[0].simulate.latencyMs = 1500));
    const env = { DATA_DIR: dataDir, CATALOG_FILE: catalog, SHUTDOWN_GRACE_MS: '8000' };
    const first = await spawnService(env);
    let key: string | undefined;
    let jobId = '';
    try {
      await waitUntilReady(first, 60_000);
      key = first.output().split('\n').find((line) => /^oj_[A-Za-z0-9_-]{43}$/.test(line));
      expect(key).toBeDefined();
      const created = await fetch(`${first.baseUrl}/v1/jobs`, {
        method: 'POST',
        headers: { Authorization: `Bearer ${key}`, 'Idempotency-Key': 'embedded-1', 'Content-Type': 'application/json' },
        body: JSON.stringify({ operation: 'summarize', input: { text: 'drain me' } }),
      });
      expect(created.status).toBe(201);
      jobId = ((await created.json()) as { id: string }).id;
      await new Promise((r) => setTimeout(r, 500)); // the attempt is in flight (1.5 s)
    } finally {
      first.kill('SIGTERM');
    }
    expect((await first.exited).code).toBe(0);
    expect(existsSync(join(dataDir, 'pg', 'postmaster.pid'))).toBe(false);

    // The same folder again: the committed job is there, settled by the attempt that drained.
    const second = await spawnService(env);
    try {
      await waitUntilReady(second, 60_000);
      expect(second.output()).not.toMatch(/^oj_/m); // the demo key is made on the first start only
      const job = (await (await fetch(`${second.baseUrl}/v1/jobs/${jobId}`, { headers: { Authorization: `Bearer ${key}` } })).json()) as { status: string; attempts: unknown[] };
      expect(job.status).toBe('succeeded');
      expect(job.attempts).toHaveLength(1);
    } finally {
      second.kill('SIGTERM');
      await second.exited;
    }
  }, 120_000);
});
