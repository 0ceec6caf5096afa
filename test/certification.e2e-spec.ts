import { FakeOpenAiServer } from './fakes/fake-openai.server.js';
import { bearer, startTestApp, type TestApp } from './helpers/app.js';
import { writeCatalog } from './helpers/catalog.js';
import { createTestDatabase, type TestDatabase } from './helpers/database.js';

describe('certification before failover (I6)', () => {
  let fake: FakeOpenAiServer;
  let db: TestDatabase;
  let t: TestApp;
  let admin: string;
  let catalogFile: string;

  const withFake = (mutate?: (c: any) => void) =>
    writeCatalog((catalog) => {
      catalog.providers.push({
        name: 'fake-openai',
        kind: 'openai',
        model: 'gpt-4o-mini',
        baseUrl: fake.url,
        apiKeyEnv: 'FAKE_OPENAI_KEY',
        timeoutMs: 1000,
        hardTimeoutMs: 2000,
      });
      mutate?.(catalog);
    });

  beforeAll(async () => {
    process.env.FAKE_OPENAI_KEY = 'sk-fake';
    fake = await new FakeOpenAiServer().start();
    db = await createTestDatabase();
    catalogFile = withFake();
    t = await startTestApp({ catalogFile }, db);
    admin = await t.key('admin');
  });
  afterAll(async () => {
    await t.close();
    await db.drop();
    await fake.stop();
  });
  beforeEach(() => fake.reset());

  const certify = (provider: string, operation = 'summarize', key = admin) =>
    t.http().post(`/v1/providers/${provider}/certifications`).set(bearer(key)).send({ operation });

  it('passes a provider that keeps the contract, through the full round trip of every golden case', async () => {
    fake.always({ kind: 'json', content: { summary: 'ok' } });
    const res = await certify('fake-openai');
    expect(res.status).toBe(201);
    expect(res.body).toMatchObject({
      provider: 'fake-openai',
      operation: 'summarize',
      passed: true,
      render: { passed: true },
      tokens: { passed: true, counter: 'tiktoken' },
    });
    expect(res.body.cases).toHaveLength(2);
    expect(res.body.cases[0]).toMatchObject({ passed: true, usage: { promptTokens: 17, completionTokens: 5 } });
    expect(fake.requests).toHaveLength(2);
    expect(fake.requests[0].body).toMatchObject({ temperature: 0, max_tokens: 30 });
  });

  it('fails a provider whose output breaks the schema, with the Ajv errors in the report', async () => {
    fake.always({ kind: 'json', content: { summary: 'ok', hallucinated: true } });
    const res = await certify('fake-openai');
    expect(res.status).toBe(201);
    expect(res.body.passed).toBe(false);
    expect(res.body.cases[0].errors).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ field: 'output.hallucinated', message: 'must NOT have additional properties' }),
      ]),
    );
  });

  it('fails a provider that answers malformed JSON', async () => {
    fake.always({ kind: 'text', content: 'Sure! Here is your summary: ...' });
    const res = await certify('fake-openai');
    expect(res.body.passed).toBe(false);
    expect(res.body.cases[0].errors).toEqual([{ field: 'output', message: 'is not valid JSON' }]);
  });

  it('fails a simulated provider whose output has an unexpected top-level key', async () => {
    const res = await certify('sim-invalid');
    expect(res.body.passed).toBe(false);
    expect(res.body.cases[0].errors.map((e: { field: string }) => e.field)).toContain('output.summary');
  });

  it('reports a template that references a variable the input lacks, and calls no provider', async () => {
    const res = await certify('fake-openai', 'titled');
    expect(res.body.passed).toBe(false);
    expect(res.body.render).toEqual({
      passed: false,
      errors: ['prompt.user references {{title}}, which the input does not have'],
    });
    expect(res.body.cases).toEqual([]);
    expect(fake.requests).toHaveLength(0);
  });

  it('fails a prompt that overflows the context window', async () => {
    const res = await certify('sim-tiny');
    expect(res.body.passed).toBe(false);
    expect(res.body.tokens.passed).toBe(false);
    expect(res.body.tokens.promptTokens + res.body.tokens.maxTokens).toBeGreaterThan(64);
  });

  it('shows the current certification per provider and operation, and voids it when the contract changes', async () => {
    fake.always({ kind: 'json', content: { summary: 'ok' } });
    await certify('sim-fallback').expect(201);
    const listed = await t.http().get('/v1/providers').set(bearer(admin)).expect(200);
    const fallback = listed.body.find((p: { name: string }) => p.name === 'sim-fallback');
    expect(fallback.certifications).toEqual([
      expect.objectContaining({ operation: 'summarize', passed: true, current: true, certified: true }),
    ]);

    // The same database, a catalog whose prompt changed: the stored report no longer matches the contract.
    const changed = withFake((c) => (c.operations[0].prompt.user = 'Summarise briefly: {{text}}'));
    const other = await startTestApp({ catalogFile: changed }, db);
    try {
      const after = await other.http().get('/v1/providers').set(bearer(admin)).expect(200);
      const stale = after.body.find((p: { name: string }) => p.name === 'sim-fallback');
      expect(stale.certifications).toEqual([
        expect.objectContaining({ operation: 'summarize', passed: true, current: false, certified: false }),
      ]);
    } finally {
      await other.close();
    }
    const schemaChanged = withFake((c) => (c.operations[0].outputSchema.properties.summary.maxLength = 10));
    const third = await startTestApp({ catalogFile: schemaChanged }, db);
    try {
      const after = await third.http().get('/v1/providers').set(bearer(admin)).expect(200);
      expect(after.body.find((p: { name: string }) => p.name === 'sim-fallback').certifications[0].current).toBe(false);
    } finally {
      await third.close();
    }
  });

  it('needs the providers:certify scope and a known provider', async () => {
    const reader = await t.key('reader', ['jobs:read']);
    await certify('sim-primary', 'summarize', reader).expect(403);
    const unknown = await certify('nope');
    expect(unknown.status).toBe(404);
    const badOp = await certify('sim-primary', 'nope');
    expect(badOp.status).toBe(422);
    expect(badOp.body.code).toBe('unknown_operation');
  });
});
