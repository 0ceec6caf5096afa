import { createSocket } from 'node:dgram';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

import { FakeOpenAiServer } from '../../../test/fakes/fake-openai.server.js';
import { HostLookup } from '../../common/host-lookup.js';
import type { ProviderSpec } from '../../config/catalog.types.js';
import { freePort } from '../../database/embedded-postgres.js';
import { ProviderError, type ProviderRequest } from '../provider.port.js';
import { ProviderHttp } from '../provider-http.js';
import { OpenAiAdapter } from './openai.adapter.js';

const spec = (baseUrl: string, hardTimeoutMs = 2000): ProviderSpec => ({
  name: 'fake',
  kind: 'openai',
  maxDeferrals: 3,
  model: 'gpt-4o-mini',
  baseUrl,
  apiKeyEnv: 'FAKE_KEY',
  timeoutMs: 200,
  hardTimeoutMs,
  onTimeout: 'hold',
  sideEffectFree: true,
  maxAttempts: 1,
  contextWindow: 8192,
});

const http = new ProviderHttp(new HostLookup({ timeoutMs: 1000 }), 2000);

const request = (signal = new AbortController().signal): ProviderRequest => ({
  prompt: { system: 'Answer in JSON.', user: 'Summarize: hello' },
  operation: 'summarize',
  outputSchema: { type: 'object', required: ['summary'], properties: { summary: { type: 'string' } } },
  temperature: 0,
  maxTokens: 50,
  maxResponseBytes: 1_048_576,
  idempotencyKey: 'attempt-1',
  signal,
});

// A forced full collection, without starting the test process with --expose-gc (as src/common/deadline.spec.ts).
setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

async function failure(promise: Promise<unknown>): Promise<ProviderError> {
  try {
    await promise;
  } catch (error) {
    expect(error).toBeInstanceOf(ProviderError);
    return error as ProviderError;
  }
  throw new Error('expected the invoke to fail');
}

describe('OpenAiAdapter against a fake OpenAI-compatible server', () => {
  let server: FakeOpenAiServer;
  let adapter: OpenAiAdapter;

  beforeAll(async () => {
    server = await new FakeOpenAiServer().start();
  });
  afterAll(async () => {
    await http.close();
    await server.stop();
  });
  beforeEach(() => {
    server.reset();
    adapter = new OpenAiAdapter(spec(server.url), 'sk-test', http);
  });

  it('returns the text, the usage and the request id, with one HTTP request carrying the attempt id', async () => {
    server.script({ kind: 'json', content: { summary: 'hi' } });
    const response = await adapter.invoke(request());
    expect(JSON.parse(response.text)).toEqual({ summary: 'hi' });
    expect(response.usage).toEqual({ promptTokens: 17, completionTokens: 5 });
    expect(response.requestId).toBe('chatcmpl-1');
    expect(server.requests).toHaveLength(1);
    expect(server.requests[0].headers['idempotency-key']).toBe('attempt-1');
    expect(server.requests[0].body).toMatchObject({
      model: 'gpt-4o-mini',
      temperature: 0,
      max_tokens: 50,
      messages: [
        { role: 'system', content: 'Answer in JSON.' },
        { role: 'user', content: 'Summarize: hello' },
      ],
      response_format: { type: 'json_schema' },
    });
  });

  it.each([429, 500, 503])('classifies %i as definitive and retryable, after exactly one request', async (status) => {
    server.always({ kind: 'status', status });
    const error = await failure(adapter.invoke(request()));
    expect({ kind: error.kind, retryable: error.retryable, status: error.status }).toEqual({
      kind: 'definitive',
      retryable: true,
      status,
    });
    expect(server.requests).toHaveLength(1);
  });

  it.each([400, 401, 403, 404, 422])('classifies %i as definitive and not retryable', async (status) => {
    server.always({ kind: 'status', status });
    const error = await failure(adapter.invoke(request()));
    expect({ kind: error.kind, retryable: error.retryable }).toEqual({ kind: 'definitive', retryable: false });
    expect(server.requests).toHaveLength(1);
  });

  it('classifies a hang past hardTimeoutMs as ambiguous, after one request', async () => {
    adapter = new OpenAiAdapter(spec(server.url, 300), 'sk-test', http);
    server.always({ kind: 'hang' });
    const started = Date.now();
    const error = await failure(adapter.invoke(request()));
    expect(error.kind).toBe('ambiguous');
    expect(error.reason).toBe('timeout');
    expect(Date.now() - started).toBeGreaterThanOrEqual(250);
    expect(server.requests).toHaveLength(1);
  });

  it('ends a body that drips after its headers at hardTimeoutMs, even after a garbage collection', async () => {
    adapter = new OpenAiAdapter(spec(server.url, 600), 'sk-test', http);
    server.always({ kind: 'drip', intervalMs: 100 });
    const started = Date.now();
    const pending = failure(adapter.invoke(request()));
    while (server.requests[0]?.answeredAt === undefined) await new Promise((r) => setTimeout(r, 10));
    gc();
    const error = await pending;
    expect({ kind: error.kind, reason: error.reason }).toEqual({ kind: 'ambiguous', reason: 'timeout' });
    expect(Date.now() - started).toBeLessThan(5_000);
  }, 10_000);

  it('classifies an abort from the worker (its hard deadline) as ambiguous', async () => {
    server.always({ kind: 'hang' });
    const error = await failure(adapter.invoke(request(AbortSignal.timeout(100))));
    expect(error.kind).toBe('ambiguous');
  });

  it('classifies a reset in the middle of the response as ambiguous', async () => {
    server.always({ kind: 'reset' });
    const error = await failure(adapter.invoke(request()));
    expect(error.kind).toBe('ambiguous');
    expect(server.requests).toHaveLength(1);
  });

  it('classifies a refused connection as definitive and retryable', async () => {
    const port = await freePort();
    adapter = new OpenAiAdapter(spec(`http://127.0.0.1:${port}/v1`), 'sk-test', http);
    const error = await failure(adapter.invoke(request()));
    expect({ kind: error.kind, reason: error.reason, retryable: error.retryable }).toEqual({
      kind: 'definitive',
      reason: 'connection_refused',
      retryable: true,
    });
  });

  it('classifies a hard deadline that passes while the name still resolves as not sent (never ambiguous)', async () => {
    const silent = createSocket('udp4');
    await new Promise<void>((resolve) => silent.bind(0, '127.0.0.1', resolve));
    let slowLookup: HostLookup | undefined;
    let slowHttp: ProviderHttp | undefined;
    try {
      slowLookup = new HostLookup({ timeoutMs: 5_000, servers: [`127.0.0.1:${silent.address().port}`] });
      const port = new URL(server.url).port;
      slowHttp = new ProviderHttp(slowLookup, 2000);
      adapter = new OpenAiAdapter(spec(`http://never-resolves.test:${port}/v1`, 300), 'sk-test', slowHttp);
      const error = await failure(adapter.invoke(request()));
      expect({ kind: error.kind, reason: error.reason, retryable: error.retryable }).toEqual({
        kind: 'definitive',
        reason: 'connection_refused',
        retryable: true,
      });
      expect(server.requests).toHaveLength(0);
    } finally {
      // The lookup outlives the call until its own deadline: closed here, as the registry does at shutdown.
      slowLookup?.close();
      await slowHttp?.close();
      silent.close();
    }
  });

  it('refuses, unread, an answer whose Content-Length passes maxResponseBytes: response_too_large, final', async () => {
    server.script({ kind: 'json', content: { summary: 'x'.repeat(2_000_000) } });
    const error = await failure(adapter.invoke(request()));
    expect({ kind: error.kind, reason: error.reason, retryable: error.retryable }).toEqual({
      kind: 'definitive',
      reason: 'response_too_large',
      retryable: false,
    });
  });

  it('cuts a chunked answer off once it passes maxResponseBytes', async () => {
    server.script({ kind: 'large', bytes: 30_000_000 });
    const error = await failure(adapter.invoke({ ...request(), maxResponseBytes: 64 * 1024 }));
    expect(error.reason).toBe('response_too_large');
    while (server.requests[0].closedAt === undefined) await new Promise((r) => setTimeout(r, 10));
    expect(server.requests[0].bytesWritten!).toBeLessThan(8_000_000);
  });

  it("keeps an error answer's status when its body passes the limit", async () => {
    server.script({ kind: 'status', status: 503, body: { error: { message: 'x'.repeat(200_000) } } });
    const error = await failure(adapter.invoke({ ...request(), maxResponseBytes: 64 * 1024 }));
    expect({ reason: error.reason, retryable: error.retryable, status: error.status }).toEqual({
      reason: 'http_503',
      retryable: true,
      status: 503,
    });
  });

  it('passes an answer just under the limit', async () => {
    server.script({ kind: 'json', content: { summary: 'x'.repeat(500_000) } });
    const response = await adapter.invoke(request());
    expect((JSON.parse(response.text) as { summary: string }).summary).toHaveLength(500_000);
  });

  it('passes malformed output through as text: the contract check, not the adapter, refuses it', async () => {
    server.script({ kind: 'text', content: '{"summary": nope' });
    const response = await adapter.invoke(request());
    expect(response.text).toBe('{"summary": nope');
  });
});
