import { SpanKind } from '@opentelemetry/api';
import { InMemorySpanExporter, type ReadableSpan } from '@opentelemetry/sdk-trace-base';

import { startTelemetry } from '../src/telemetry/telemetry.js';
import { shutdownTracing } from '../src/telemetry/tracing.js';
import { FakeOpenAiServer } from './fakes/fake-openai.server.js';
import { bearer, startTestApp, type TestApp } from './helpers/app.js';
import { writeCatalog } from './helpers/catalog.js';

/**
 * One job's spans, from the POST to the settlement, form one trace (docs/operations.md#tracing): the HTTP server
 * span of the request, its INSERT, then in the worker the claim, the attempt, the provider call with the SDK's HTTP
 * client span, and the settlement, all joined through the traceparent stored on the job.
 */
describe('tracing: one connected trace from POST to settlement', () => {
  const exporter = new InMemorySpanExporter();
  let fake: FakeOpenAiServer;
  let t: TestApp;
  let key: string;

  beforeAll(async () => {
    // Before the app exists, as `--import ./dist/src/telemetry/register.js` does for the real process.
    startTelemetry({ enabled: true, serviceName: undefined }, { exporter });
    process.env.FAKE_OPENAI_KEY = 'sk-fake';
    fake = await new FakeOpenAiServer().start();
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
    t = await startTestApp({ role: 'all', catalogFile, workerPollMs: 10, reconcileIntervalMs: 100 });
    key = await t.key('tracer');
  });
  afterAll(async () => {
    await t?.close();
    await fake?.stop();
    await shutdownTracing();
  });

  it('joins the request, the claim, the provider call and the settlement of a job in the request trace', async () => {
    fake.always({ kind: 'json', content: { summary: 'traced' } });
    const created = await t
      .http()
      .post('/v1/jobs')
      .set(bearer(key))
      .set('Idempotency-Key', 'trace-1')
      .send({ operation: 'summarize', input: { text: 'trace me' } });
    expect(created.status).toBe(201);
    const jobId: string = created.body.id;

    const until = Date.now() + 15_000;
    let spans: ReadableSpan[] = [];
    while (Date.now() < until) {
      spans = exporter.getFinishedSpans();
      if (spans.some((s) => s.name === 'onejob.attempt' && s.attributes['onejob.job_id'] === jobId)) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    const job = await t.http().get(`/v1/jobs/${jobId}`).set(bearer(key));
    expect(job.body.status).toBe('succeeded');

    // Under Jest the node:http and pg instrumentations cannot hook modules (Jest loads them itself): the request's
    // trace starts at the job creation span here; test/telemetry.process.e2e-spec.ts checks the real process.
    const create = spans.find((s) => s.name === 'onejob.job.create');
    expect(create).toBeDefined();
    const traceId = create!.spanContext().traceId;
    const [row] = await t.dataSource.query('SELECT trace_context FROM jobs WHERE id = $1', [jobId]);
    expect(row.trace_context).toBe(`00-${traceId}-${create!.spanContext().spanId}-01`);

    const trace = spans.filter((s) => s.spanContext().traceId === traceId);
    const names = trace.map((s) => s.name);
    for (const step of ['onejob.claim', 'onejob.attempt', 'onejob.provider.call', 'onejob.settle']) {
      expect(names).toContain(step);
    }
    // The worker's spans are children of the creating span, in another process as well as in this one.
    const attempt = trace.find((s) => s.name === 'onejob.attempt')!;
    expect(attempt.parentSpanContext?.spanId).toBe(create!.spanContext().spanId);
    expect(attempt.attributes['onejob.job_id']).toBe(jobId);
    // The SDK's fetch to the provider, traced by the undici instrumentation under the provider-call span.
    const call = trace.find((s) => s.name === 'onejob.provider.call')!;
    expect(
      trace.filter((s) => s.kind === SpanKind.CLIENT && s.parentSpanContext?.spanId === call.spanContext().spanId),
    ).toHaveLength(1);
    expect(trace.find((s) => s.name === 'onejob.settle')!.parentSpanContext?.spanId).toBe(attempt.spanContext().spanId);

    // Connected: one root, and every other span's parent is in the trace.
    const ids = new Set(trace.map((s) => s.spanContext().spanId));
    expect(trace.filter((s) => !s.parentSpanContext).map((s) => s.name)).toEqual(['onejob.job.create']);
    expect(trace.filter((s) => s.parentSpanContext && !ids.has(s.parentSpanContext.spanId)).map((s) => s.name)).toEqual(
      [],
    );
  });
});
