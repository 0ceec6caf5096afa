import { bearer, startTestApp, type TestApp } from './helpers/app.js';

interface Case {
  name: string;
  method?: 'post' | 'get';
  path?: string;
  headers?: Record<string, string>;
  auth?: 'none' | 'unknown' | 'read-only' | 'ok';
  body?: unknown;
  raw?: string;
  status: number;
  code: string;
  field?: string;
}

const good = { operation: 'summarize', input: { text: 'hello' } };

const cases: Case[] = [
  { name: 'no Idempotency-Key', headers: {}, status: 400, code: 'idempotency_key_missing', field: 'Idempotency-Key' },
  {
    name: 'an empty key',
    headers: { 'Idempotency-Key': '' },
    status: 400,
    code: 'idempotency_key_invalid',
    field: 'Idempotency-Key',
  },
  {
    name: 'a 256-character key',
    headers: { 'Idempotency-Key': 'k'.repeat(256) },
    status: 400,
    code: 'idempotency_key_invalid',
  },
  { name: 'a key with a space', headers: { 'Idempotency-Key': 'a b' }, status: 400, code: 'idempotency_key_invalid' },
  { name: 'a key with a tab', headers: { 'Idempotency-Key': 'a\tb' }, status: 400, code: 'idempotency_key_invalid' },
  {
    name: 'a key with a non-ASCII character',
    headers: { 'Idempotency-Key': 'clé' },
    status: 400,
    code: 'idempotency_key_invalid',
  },
  { name: 'malformed JSON', raw: '{"operation": "summarize", "input": {', status: 400, code: 'validation_failed' },
  { name: 'a JSON array body', raw: '[1,2]', status: 400, code: 'validation_failed' },
  {
    name: 'a __proto__ key',
    raw: '{"operation":"summarize","input":{"text":"x"},"__proto__":{"admin":true}}',
    status: 400,
    code: 'validation_failed',
  },
  {
    name: 'operation of the wrong type',
    body: { operation: 42, input: { text: 'x' } },
    status: 400,
    code: 'validation_failed',
    field: 'operation',
  },
  {
    name: 'input of the wrong type',
    body: { operation: 'summarize', input: 'text' },
    status: 400,
    code: 'validation_failed',
    field: 'input',
  },
  {
    name: 'providers of the wrong type',
    body: { ...good, providers: 'sim-primary' },
    status: 400,
    code: 'validation_failed',
    field: 'providers',
  },
  {
    name: 'an empty provider chain',
    body: { ...good, providers: [] },
    status: 400,
    code: 'validation_failed',
    field: 'providers',
  },
  {
    name: 'an unknown field',
    body: { ...good, priority: 'high' },
    status: 400,
    code: 'validation_failed',
    field: 'priority',
  },
  {
    name: 'a missing operation',
    body: { input: { text: 'x' } },
    status: 400,
    code: 'validation_failed',
    field: 'operation',
  },
  {
    name: 'input nested 100 deep',
    body: { operation: 'summarize', input: JSON.parse('{"a":'.repeat(100) + '1' + '}'.repeat(100)) },
    status: 400,
    code: 'validation_failed',
    field: 'body',
  },
  {
    name: 'an unknown operation',
    body: { operation: 'translate', input: { text: 'x' } },
    status: 422,
    code: 'unknown_operation',
    field: 'operation',
  },
  {
    name: 'an unknown provider',
    body: { ...good, providers: ['sim-primary', 'nope'] },
    status: 422,
    code: 'unknown_provider',
    field: 'providers[1]',
  },
  {
    name: 'input failing the schema',
    body: { operation: 'summarize', input: { words: 3 } },
    status: 422,
    code: 'validation_failed',
    field: 'input.text',
  },
  {
    name: 'input with a wrong-typed field',
    body: { operation: 'summarize', input: { text: 7 } },
    status: 422,
    code: 'validation_failed',
    field: 'input.text',
  },
  {
    name: 'text/plain content',
    raw: 'hello',
    headers: { 'Idempotency-Key': 'k', 'Content-Type': 'text/plain' },
    status: 415,
    code: 'unsupported_media_type',
  },
  { name: 'no Authorization', auth: 'none', status: 401, code: 'unauthorized' },
  { name: 'an unknown API key', auth: 'unknown', status: 401, code: 'unauthorized' },
  { name: 'a key without jobs:write', auth: 'read-only', status: 403, code: 'forbidden' },
  {
    name: 'a non-uuid job id',
    method: 'get',
    path: '/v1/jobs/123',
    status: 400,
    code: 'validation_failed',
    field: 'id',
  },
  {
    name: 'a non-uuid id to cancel',
    method: 'post',
    path: '/v1/jobs/not-a-uuid/cancel',
    headers: {},
    status: 400,
    code: 'validation_failed',
    field: 'id',
  },
  {
    name: 'a path parameter over the router limit',
    method: 'get',
    path: `/v1/jobs/${'x'.repeat(300)}`,
    status: 400,
    code: 'validation_failed',
    field: 'path',
  },
  {
    name: 'a malformed percent-encoding in the path',
    method: 'get',
    path: '/v1/jobs/%E0%A4%A',
    status: 400,
    code: 'validation_failed',
  },
  { name: 'an unknown route', method: 'get', path: '/v1/nothing-here', status: 404, code: 'not_found' },
  {
    name: 'a job id that does not exist',
    method: 'get',
    path: '/v1/jobs/00000000-0000-4000-8000-000000000000',
    status: 404,
    code: 'not_found',
  },
];

describe('bad input is refused whole (I8)', () => {
  let t: TestApp;
  const keys: Record<string, string> = {};

  beforeAll(async () => {
    t = await startTestApp({ bodyLimitBytes: 4096 });
    keys.ok = await t.key('owner-bad-input');
    keys['read-only'] = await t.key('owner-bad-input', ['jobs:read']);
    keys.unknown = 'oj_this-key-was-never-issued';
  });
  afterAll(() => t.close());

  it.each(cases)('answers $status $code to $name, as problem+json, writing nothing', async (c) => {
    const method = c.method ?? 'post';
    let req = t.http()[method](c.path ?? '/v1/jobs');
    const auth = c.auth ?? 'ok';
    if (auth !== 'none') req = req.set(bearer(keys[auth]));
    const headers = c.headers ?? { 'Idempotency-Key': `key-${c.name.replace(/\W/g, '')}` };
    for (const [name, value] of Object.entries(headers)) req = req.set(name, value);
    if (c.raw !== undefined) {
      if (!headers['Content-Type']) req = req.set('Content-Type', 'application/json');
      req = req.send(c.raw);
    } else if (method === 'post' && c.path === undefined) {
      req = req.send((c.body ?? good) as object);
    }
    const res = await req;
    expect({ status: res.status, code: res.body.code }).toEqual({ status: c.status, code: c.code });
    expect(res.headers['content-type']).toMatch(/^application\/problem\+json/);
    expect(res.body).toMatchObject({ status: c.status, type: `urn:onejob:problem:${c.code}` });
    expect(typeof res.body.requestId).toBe('string');
    if (c.field) expect(res.body.errors.map((e: { field: string }) => e.field)).toContain(c.field);
    const rows = await t.dataSource.query(
      'SELECT (SELECT count(*) FROM jobs)::int AS jobs, (SELECT count(*) FROM job_events)::int AS events',
    );
    expect(rows[0]).toEqual({ jobs: 0, events: 0 });
  });

  it('answers 413 problem+json to a body over the configured limit', async () => {
    const res = await t
      .http()
      .post('/v1/jobs')
      .set(bearer(keys.ok))
      .set('Idempotency-Key', 'big')
      .send({ operation: 'summarize', input: { text: 'x'.repeat(10_000) } });
    expect(res.status).toBe(413);
    expect(res.body.code).toBe('payload_too_large');
    expect(res.headers['content-type']).toMatch(/^application\/problem\+json/);
  });

  it('echoes a client X-Request-Id and names it in the problem', async () => {
    const res = await t.http().get('/v1/jobs/123').set(bearer(keys.ok)).set('X-Request-Id', 'trace-abc-123');
    expect(res.headers['x-request-id']).toBe('trace-abc-123');
    expect(res.body.requestId).toBe('trace-abc-123');
  });
});
