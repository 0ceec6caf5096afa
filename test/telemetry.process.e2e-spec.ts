import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

import { FakeOpenAiServer } from './fakes/fake-openai.server.js';
import { writeCatalog } from './helpers/catalog.js';
import { createTestDatabase, type TestDatabase } from './helpers/database.js';
import { type ServiceProcess, spawnService, waitUntilReady } from './helpers/process.js';
import { readRaw } from './helpers/sse.js';
import { createKey } from './race/target.js';

interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  kind: number;
  attributes?: Array<{ key: string; value: { stringValue?: string } }>;
}

const SERVER = 2;
const CLIENT = 3;

/** A collector that keeps what the service exports over OTLP/HTTP with JSON bodies. */
async function startCollector(): Promise<{ url: string; spans: OtlpSpan[]; stop(): Promise<void> }> {
  const spans: OtlpSpan[] = [];
  const server: Server = createServer((req, res) => {
    let body = '';
    req.on('data', (chunk: Buffer) => (body += chunk.toString()));
    req.on('end', () => {
      // The SDK also exports metrics (/v1/metrics) to the same endpoint unless OTEL_METRICS_EXPORTER=none.
      const parsed =
        req.url === '/v1/traces'
          ? (JSON.parse(body) as { resourceSpans: Array<{ scopeSpans: Array<{ spans: OtlpSpan[] }> }> })
          : { resourceSpans: [] };
      for (const r of parsed.resourceSpans) for (const s of r.scopeSpans) spans.push(...s.spans);
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    spans,
    stop: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

/**
 * The real process as `npm start` runs it (`--import ./dist/src/telemetry/register.js`), configured by OTEL_*
 * variables only: the ESM hook lets the node:http and pg instrumentations see the app's modules, so the trace starts
 * at the POST's server span and holds the SQL of the INSERT and of the settlement.
 */
describe('tracing in the started service (OTEL_* variables, --import register)', () => {
  let database: TestDatabase;
  let fake: FakeOpenAiServer;
  let collector: Awaited<ReturnType<typeof startCollector>>;
  let service: ServiceProcess;
  let key: string;

  beforeAll(async () => {
    database = await createTestDatabase();
    fake = await new FakeOpenAiServer().start();
    collector = await startCollector();
    const catalogFile = writeCatalog((catalog) => {
      catalog.providers.push({
        name: 'fake-openai',
        kind: 'openai',
        model: 'gpt-4o-mini',
        baseUrl: fake.url,
        apiKeyEnv: 'FAKE_OPENAI_KEY',
        timeoutMs: 2000,
        hardTimeoutMs: 4000,
      });
      catalog.operations[0].providers = ['fake-openai'];
    });
    service = await spawnService(
      {
        DATABASE_URL: database.url,
        CATALOG_FILE: catalogFile,
        FAKE_OPENAI_KEY: 'sk-fake',
        WORKER_POLL_MS: '10',
        LOG_LEVEL: 'debug',
        OTEL_EXPORTER_OTLP_ENDPOINT: collector.url,
        OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
        OTEL_BSP_SCHEDULE_DELAY: '100',
        OTEL_SERVICE_NAME: 'onejob-test',
      },
      ['--import', './dist/src/telemetry/register.js'],
    );
    await waitUntilReady(service, 60_000);
    key = createKey(database.url, 'tracer', 'jobs:write,jobs:read');
  }, 90_000);
  afterAll(async () => {
    service?.kill('SIGTERM');
    await service?.exited;
    await collector?.stop();
    await fake?.stop();
    await database?.drop();
  });

  it('exports one trace rooted at POST /v1/jobs down to the provider call and the settlement SQL', async () => {
    fake.always({ kind: 'json', content: { summary: 'traced' } });
    const res = await fetch(`${service.baseUrl}/v1/jobs`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${key}`,
        'idempotency-key': 'trace-process-1',
        'content-type': 'application/json',
      },
      body: JSON.stringify({ operation: 'summarize', input: { text: 'trace me' } }),
    });
    expect(res.status).toBe(201);
    const requestId = res.headers.get('x-request-id');
    const { id: jobId } = (await res.json()) as { id: string };

    const until = Date.now() + 20_000;
    const attr = (s: OtlpSpan, k: string) => s.attributes?.find((a) => a.key === k)?.value.stringValue;
    while (
      Date.now() < until &&
      !collector.spans.some((s) => s.name === 'onejob.attempt' && attr(s, 'onejob.job_id') === jobId)
    ) {
      await new Promise((r) => setTimeout(r, 100));
    }
    const create = collector.spans.find((s) => s.name === 'onejob.job.create');
    expect(create).toBeDefined();
    const trace = collector.spans.filter((s) => s.traceId === create!.traceId);
    const roots = trace.filter((s) => !s.parentSpanId);
    expect(roots.map((s) => [s.name, s.kind])).toEqual([[expect.stringMatching(/^POST/), SERVER]]);
    const names = trace.map((s) => s.name);
    for (const step of [
      'onejob.job.create',
      'onejob.claim',
      'onejob.attempt',
      'onejob.provider.call',
      'onejob.settle',
    ]) {
      expect(names).toContain(step);
    }
    const byId = new Map(trace.map((s) => [s.spanId, s]));
    expect(trace.filter((s) => s.parentSpanId && !byId.has(s.parentSpanId)).map((s) => s.name)).toEqual([]);
    const call = trace.find((s) => s.name === 'onejob.provider.call')!;
    expect(trace.some((s) => s.kind === CLIENT && s.parentSpanId === call.spanId)).toBe(true);
    // SQL spans (pg instrumentation through the ESM hook) under the creation and under the settlement.
    const under = (parent: OtlpSpan) => trace.filter((s) => s.parentSpanId === parent.spanId).map((s) => s.name);
    expect(under(create!).some((n) => /^pg\./.test(n))).toBe(true);
    expect(under(trace.find((s) => s.name === 'onejob.settle')!).some((n) => /^pg\./.test(n))).toBe(true);

    // Log lines: the request's line carries its requestId and traceId; the worker's lines carry the job's traceId.
    const lines = service
      .output()
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(lines.find((l) => l.msg === 'request completed' && l.requestId === requestId)?.traceId).toBe(
      create!.traceId,
    );
    expect(lines.find((l) => l.msg === 'attempt result' && l.jobId === jobId)?.traceId).toBe(create!.traceId);
  }, 60_000);

  it("records a stream's access_token redacted in the server span, never the token", async () => {
    fake.always({ kind: 'json', content: { summary: 'streamed' } });
    const created = await fetch(`${service.baseUrl}/v1/jobs`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${key}`,
        'idempotency-key': 'trace-stream-1',
        'content-type': 'application/json',
      },
      body: JSON.stringify({ operation: 'summarize', input: { text: 'stream me' } }),
    });
    const { id: jobId } = (await created.json()) as { id: string };
    // Settled before the stream opens: nothing is left in flight for the SIGTERM at the end.
    const job = (id: string) =>
      fetch(`${service.baseUrl}/v1/jobs/${id}`, { headers: { authorization: `Bearer ${key}` } }).then(
        (r) => r.json() as Promise<{ status: string }>,
      );
    for (let until = Date.now() + 15_000; Date.now() < until && (await job(jobId)).status !== 'succeeded';) {
      await new Promise((r) => setTimeout(r, 100));
    }
    const minted = await fetch(`${service.baseUrl}/v1/jobs/${jobId}/stream-tokens`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}` },
    });
    const { token, url } = (await minted.json()) as { token: string; url: string };
    // One connection of its own, closed once the first event is in (fetch's pool could keep it open).
    const stream = await readRaw(`${service.baseUrl}${url}`, {}, (text) => text.includes('event: job.pending'));
    expect(stream.status).toBe(200);
    const attr = (s: OtlpSpan, k: string) => s.attributes?.find((a) => a.key === k)?.value.stringValue;
    const until = Date.now() + 15_000;
    let span: OtlpSpan | undefined;
    while (Date.now() < until && !span) {
      span = collector.spans.find((s) => s.kind === SERVER && attr(s, 'url.path') === `/v1/jobs/${jobId}/events`);
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(span && attr(span, 'url.query')).toBe('access_token=REDACTED');
    expect(JSON.stringify(collector.spans)).not.toContain(token);
  }, 30_000);
});
