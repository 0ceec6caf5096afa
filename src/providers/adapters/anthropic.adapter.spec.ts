import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

import { HostLookup } from '../../common/host-lookup.js';
import type { ProviderSpec } from '../../config/catalog.types.js';
import { ProviderError, type ProviderRequest } from '../provider.port.js';
import { ProviderHttp } from '../provider-http.js';
import { AnthropicAdapter } from './anthropic.adapter.js';

// The Anthropic SDK through the same HTTP layer as the OpenAI one (provider-http.ts): its fetch and the per-call
// dispatcher reach the wire, a name that does not resolve is not sent, an answer past the limit is cut off.

const spec = (baseUrl: string): ProviderSpec => ({
  name: 'fake-anthropic',
  kind: 'anthropic',
  maxDeferrals: 3,
  model: 'claude-test',
  baseUrl,
  apiKeyEnv: 'FAKE_KEY',
  timeoutMs: 500,
  hardTimeoutMs: 2000,
  onTimeout: 'hold',
  sideEffectFree: true,
  maxAttempts: 1,
  contextWindow: 8192,
});

const request = (maxResponseBytes = 1_048_576): ProviderRequest => ({
  prompt: { user: 'Summarize: hello' },
  operation: 'summarize',
  outputSchema: { type: 'object' },
  temperature: 0,
  maxTokens: 50,
  maxResponseBytes,
  idempotencyKey: 'attempt-1',
  signal: new AbortController().signal,
});

const message = (text: string) =>
  JSON.stringify({
    id: 'msg_1',
    type: 'message',
    role: 'assistant',
    model: 'claude-test',
    content: [{ type: 'text', text }],
    stop_reason: 'end_turn',
    usage: { input_tokens: 11, output_tokens: 3 },
  });

describe('AnthropicAdapter over the provider HTTP layer', () => {
  let server: Server;
  let url: string;
  let answer = message('{"summary":"hi"}');
  const seen: string[] = [];
  const http = new ProviderHttp(new HostLookup({ timeoutMs: 300, servers: ['127.0.0.1:9'] }), 2000);

  beforeAll(async () => {
    server = createServer((req, res) => {
      seen.push(`${req.method} ${req.url} ${req.headers['idempotency-key']}`);
      req.resume();
      req.on('end', () => res.writeHead(200, { 'content-type': 'application/json' }).end(answer));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    await http.close();
    await new Promise((resolve) => server.close(resolve));
  });

  it('returns the text and usage, the request carrying the attempt id', async () => {
    answer = message('{"summary":"hi"}');
    const response = await new AnthropicAdapter(spec(url), 'sk-ant-test', http).invoke(request());
    expect(response).toEqual({
      text: '{"summary":"hi"}',
      usage: { promptTokens: 11, completionTokens: 3 },
      requestId: 'msg_1',
    });
    expect(seen.at(-1)).toBe('POST /v1/messages attempt-1');
  });

  it('fails an answer past maxResponseBytes as response_too_large', async () => {
    answer = message(`{"summary":"${'x'.repeat(100_000)}"}`);
    const error = await new AnthropicAdapter(spec(url), 'sk-ant-test', http)
      .invoke(request(10_000))
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ProviderError);
    expect((error as ProviderError).reason).toBe('response_too_large');
  });

  it('fails a name that does not resolve as a refused connection: nothing was sent', async () => {
    const port = new URL(url).port;
    const error = await new AnthropicAdapter(spec(`http://never-resolves.test:${port}`), 'sk-ant-test', http)
      .invoke(request())
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ProviderError);
    expect({ kind: (error as ProviderError).kind, reason: (error as ProviderError).reason }).toEqual({
      kind: 'definitive',
      reason: 'connection_refused',
    });
  });
});
