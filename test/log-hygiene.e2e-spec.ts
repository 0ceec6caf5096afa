import pg from 'pg';

import { FakeOpenAiServer } from './fakes/fake-openai.server.js';
import { writeCatalog } from './helpers/catalog.js';
import { createTestDatabase, type TestDatabase } from './helpers/database.js';
import { type ServiceProcess, spawnService, waitUntilReady } from './helpers/process.js';
import { sleep, waitFor } from './helpers/wait.js';
import { createKey } from './race/target.js';

const PROVIDER_KEY = 'sk-test-configured0123456789abcdef';
const ECHOED_KEY = 'sk-live-abcdef0123456789SECRETSECRET';

/**
 * The service as a separate OS process, so that its real log output (pino on stdout) is what the test reads:
 * nothing of the input, the SQL or a provider's credentials may appear in it, and owners see fixed messages.
 */
describe('what the logs and the owners see of failures (issue 11 items 5 and 10)', () => {
  let fake: FakeOpenAiServer;
  let db: TestDatabase;
  let service: ServiceProcess;
  let admin: pg.Client;
  let key: string;

  beforeAll(async () => {
    fake = await new FakeOpenAiServer().start();
    db = await createTestDatabase();
    const catalogFile = writeCatalog((catalog) => {
      catalog.providers.push({
        name: 'fake-openai',
        kind: 'openai',
        model: 'gpt-4o-mini',
        baseUrl: fake.url,
        apiKeyEnv: 'FAKE_OPENAI_KEY',
        timeoutMs: 2000,
        hardTimeoutMs: 3000,
        maxAttempts: 1,
      });
    });
    service = await spawnService({
      DATABASE_URL: db.url,
      CATALOG_FILE: catalogFile,
      ROLE: 'all',
      LOG_LEVEL: 'info',
      WORKER_POLL_MS: '20',
      RECONCILE_INTERVAL_MS: '200',
      FAKE_OPENAI_KEY: PROVIDER_KEY,
    });
    await waitUntilReady(service);
    key = createKey(db.url, 'owner-logs', 'jobs:write,jobs:read');
    admin = new pg.Client({ connectionString: db.url });
    await admin.connect();
  });
  afterAll(async () => {
    await admin?.end();
    service?.kill('SIGTERM');
    await service?.exited;
    await db?.drop();
    await fake?.stop();
  });
  beforeEach(() => fake.reset());

  const post = (raw: string) =>
    fetch(`${service.baseUrl}/v1/jobs`, {
      method: 'POST',
      headers: {
        Authorization: `Bearer ${key}`,
        'Idempotency-Key': `k-${Math.random()}`,
        'Content-Type': 'application/json',
      },
      body: raw,
    });
  const job = async (id: string) =>
    (
      await fetch(`${service.baseUrl}/v1/jobs/${id}`, { headers: { Authorization: `Bearer ${key}` } })
    ).json() as Promise<any>;
  const settledJob = (id: string) =>
    waitFor(
      () => job(id),
      (j) => ['succeeded', 'failed', 'cancelled'].includes(j.status),
      15_000,
    );
  const logsAfterAMoment = async () => {
    await sleep(300); // pino writes asynchronously
    return service.output();
  };

  it('answers NUL in the input with 422 and logs none of the input', async () => {
    const res = await post('{"operation":"summarize","input":{"text":"MARKER-A private words\\u0000"}}');
    expect(res.status).toBe(422);
    expect(((await res.json()) as any).errors).toEqual([expect.objectContaining({ field: 'input.text' })]);
    expect(await logsAfterAMoment()).not.toContain('MARKER-A');
  });

  it('logs an unexpected database error by class and code only: no SQL, no parameters, no input', async () => {
    // A constraint the service does not expect: its INSERT fails with a QueryFailedError that carries the SQL
    // and the parameters (the whole input), the shape of any unforeseen database failure.
    await admin.query(`ALTER TABLE jobs ADD CONSTRAINT chk_test_refuse CHECK (input->>'text' NOT LIKE 'MARKER-B%')`);
    try {
      const res = await post('{"operation":"summarize","input":{"text":"MARKER-B private words"}}');
      expect(res.status).toBe(500);
      expect(((await res.json()) as any).code).toBe('internal_error');
      const logs = await logsAfterAMoment();
      const line = logs.split('\n').find((l) => l.includes('unhandled error'));
      expect(line).toBeDefined();
      expect(JSON.parse(line!)).toMatchObject({ errorClass: 'QueryFailedError', code: '23514' });
      expect(logs).not.toContain('MARKER-B');
      expect(logs).not.toMatch(/INSERT INTO/i);
      expect(logs).not.toContain('"parameters"');
    } finally {
      await admin.query('ALTER TABLE jobs DROP CONSTRAINT chk_test_refuse');
    }
  });

  it("shows owners a classified provider 401 with a fixed message; the provider's text reaches the log only, key redacted", async () => {
    fake.always({
      kind: 'status',
      status: 401,
      body: {
        error: {
          message: `Incorrect API key provided: ${ECHOED_KEY}. Ask the admins of llm-gateway.corp.internal:8443.`,
          type: 'invalid_request_error',
          code: 'invalid_api_key',
        },
      },
    });
    const res = await post(
      '{"operation":"summarize","input":{"text":"MARKER-C private words"},"providers":["fake-openai"]}',
    );
    expect(res.status).toBe(201);
    const settled = await settledJob(((await res.json()) as any).id);
    expect(settled.status).toBe('failed');
    expect(settled.attempts).toHaveLength(1);
    expect(settled.attempts[0].error).toMatchObject({
      reason: 'http_401',
      retryable: false,
      status: 401,
      message: 'the provider refused the credentials',
    });
    const shown = JSON.stringify(settled);
    expect(shown).not.toContain(ECHOED_KEY.slice(0, 12));
    expect(shown).not.toContain('llm-gateway');
    expect(shown).not.toContain('Incorrect API key');

    const logs = await logsAfterAMoment();
    const line = logs.split('\n').find((l) => l.includes('provider call failed'));
    expect(line).toBeDefined();
    expect(JSON.parse(line!)).toMatchObject({ provider: 'fake-openai', reason: 'http_401', status: 401 });
    expect(line).toContain('Incorrect API key provided: [redacted]');
    expect(logs).not.toContain(ECHOED_KEY.slice(0, 12));
    expect(logs).not.toContain(PROVIDER_KEY.slice(0, 12));
    expect(logs).not.toContain('MARKER-C');
  });

  it('records provider output PostgreSQL cannot store as a contract_violation failed attempt, never a lost result', async () => {
    fake.always({ kind: 'text', content: '{"summary":"MARKER-D\\u0000 with a NUL"}' });
    const res = await post('{"operation":"summarize","input":{"text":"something"},"providers":["fake-openai"]}');
    expect(res.status).toBe(201);
    const settled = await settledJob(((await res.json()) as any).id);
    expect(settled.status).toBe('failed');
    expect(settled.attempts[0]).toMatchObject({ status: 'failed', error: { reason: 'contract_violation' } });
    expect(settled.attempts[0].error.details).toEqual([expect.objectContaining({ field: 'output.summary' })]);
    expect(await logsAfterAMoment()).not.toContain('MARKER-D');
  });
});
