import { chmodSync, existsSync, mkdtempSync, statSync, writeFileSync } from 'node:fs';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { parse, stringify } from 'yaml';

import { createTestDatabase, type TestDatabase } from './helpers/database.js';
import { type ServiceProcess, spawnService, waitUntilReady } from './helpers/process.js';
import { waitFor } from './helpers/wait.js';

const DEMO_KEY = /^oj_[A-Za-z0-9_-]{43}$/;
/** The demo key line, printed just after the port is bound (so possibly just after readiness answers). */
const demoKeyOf = (service: ServiceProcess) =>
  waitFor(
    async () =>
      service
        .output()
        .split('\n')
        .find((line) => DEMO_KEY.test(line)),
    (line) => line !== undefined,
    10_000,
    50,
  );

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
    [
      'failover on a provider with side effects',
      (c: any) => (c.providers[2].sideEffectFree = false),
      'providers[2].onTimeout',
    ],
    [
      'an operation chain naming no provider',
      (c: any) => (c.operations[0].providers = ['sim-primary', 'ghost']),
      'operations[0].providers[1]',
    ],
    [
      'an invalid input schema',
      (c: any) => (c.operations[1].inputSchema = { type: 'banana' }),
      'operations[1].inputSchema',
    ],
  ])('exits 1 on a catalog with %s, naming the field', async (_name, mutate, field) => {
    const service = await spawnService({ DATABASE_URL: db.url, CATALOG_FILE: badCatalog(mutate) });
    const { code } = await service.exited;
    expect(code).toBe(1);
    expect(service.output()).toContain(`Invalid catalog: ${field}`);
  });

  it.each([
    ['an HMAC algorithm', { algorithms: ['HS256'] }, 'issuers[0].algorithms[0] must be one of RS256, ES256, EdDSA'],
  ])('exits 1 on an AUTH_ISSUERS_FILE with %s, naming the field', async (_name, change, message) => {
    const issuer = {
      issuer: 'https://idp.example',
      audience: 'onejob',
      owner: { claim: 'sub' },
      scopes: { static: ['jobs:read'] },
    };
    const file = join(mkdtempSync(join(tmpdir(), 'onejob-issuers-')), 'issuers.yaml');
    writeFileSync(file, stringify({ issuers: [{ ...issuer, ...change }] }));
    const service = await spawnService({ DATABASE_URL: db.url, AUTH_ISSUERS_FILE: file });
    const { code } = await service.exited;
    expect(code).toBe(1);
    expect(service.output()).toContain(`Invalid AUTH_ISSUERS_FILE: ${message}`);
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
    let jobId: string | undefined;
    try {
      await waitUntilReady(first, 60_000);
      key = await demoKeyOf(first);
      const created = await fetch(`${first.baseUrl}/v1/jobs`, {
        method: 'POST',
        headers: {
          Authorization: `Bearer ${key}`,
          'Idempotency-Key': 'embedded-1',
          'Content-Type': 'application/json',
        },
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
      const job = (await (
        await fetch(`${second.baseUrl}/v1/jobs/${jobId}`, { headers: { Authorization: `Bearer ${key}` } })
      ).json()) as { status: string; attempts: unknown[] };
      expect(job.status).toBe('succeeded');
      expect(job.attempts).toHaveLength(1);
    } finally {
      second.kill('SIGTERM');
      await second.exited;
    }
  }, 120_000);
});

describe('the demo key', () => {
  it('is printed only once the port is bound, kept in DATA_DIR/demo-api-key (0600), and named at the next start', async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'onejob-demo-key-'));
    chmodSync(dataDir, 0o777);
    const file = join(dataDir, 'demo-api-key');
    // The port is taken: the start fails, and no key was made that nobody saw.
    const blocker = createServer();
    await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', resolve));
    const port = (blocker.address() as { port: number }).port;
    const taken = await spawnService({ DATA_DIR: dataDir, PORT: String(port) });
    expect((await taken.exited).code).toBe(1);
    expect(taken.output()).not.toMatch(/^oj_/m);
    expect(existsSync(file)).toBe(false);
    await new Promise((resolve) => blocker.close(resolve));

    const first = await spawnService({ DATA_DIR: dataDir });
    let key: string | undefined;
    try {
      await waitUntilReady(first, 60_000);
      key = await demoKeyOf(first);
      expect(readFileSync(file, 'utf8').trim()).toBe(key);
      expect(statSync(file).mode & 0o777).toBe(0o600);
    } finally {
      first.kill('SIGTERM');
      await first.exited;
    }
    const second = await spawnService({ DATA_DIR: dataDir, LOG_LEVEL: 'info' });
    try {
      await waitUntilReady(second, 60_000);
      await waitFor(
        async () => second.output(),
        (text) => text.includes(`The demo API key made at the first start is in ${file}`),
        10_000,
        50,
      );
      expect(second.output()).not.toMatch(/^oj_/m);
      const res = await fetch(`${second.baseUrl}/v1/jobs`, { headers: { Authorization: `Bearer ${key}` } });
      expect(res.status).toBe(200);
    } finally {
      second.kill('SIGTERM');
      await second.exited;
    }
  }, 150_000);
});
