import type { IncomingMessage } from 'node:http';

import { context, propagation, trace } from '@opentelemetry/api';
import { HttpInstrumentation } from '@opentelemetry/instrumentation-http';
import { PgInstrumentation } from '@opentelemetry/instrumentation-pg';
import { UndiciInstrumentation } from '@opentelemetry/instrumentation-undici';
import { NodeSDK } from '@opentelemetry/sdk-node';
import { SimpleSpanProcessor, type SpanExporter } from '@opentelemetry/sdk-trace-base';

import type { TelemetryEnv } from '../config/telemetry-env.js';
import { enableTracing } from './tracing.js';

let sdk: NodeSDK | undefined;

/** The query parameters the HTTP instrumentation redacts by default (its DEFAULT_QUERY_STRINGS_TO_REDACT). */
const REDACTED_BY_DEFAULT = [
  'sig',
  'Signature',
  'AWSAccessKeyId',
  'X-Goog-Signature',
  'X-Amz-Signature',
  'X-Amz-Credential',
  'X-Amz-Security-Token',
];

/** Probes and scrapes are not traced: they would drown the traces that matter. */
const UNTRACED = /^\/(health\/|metrics(\?|$))/;

/**
 * Starts the official Node SDK with the instrumentations onejob needs: HTTP server and client (node:http), fetch
 * (undici: the provider SDKs' HTTP calls), pg. pg spans only inside a trace, so idle claim polling makes no
 * traces. The exporter, endpoint, sampler and resource come from the OTEL_* variables; `exporter` replaces them in
 * tests (an in-memory exporter).
 */
export function startTelemetry(env: TelemetryEnv, options: { exporter?: SpanExporter } = {}): void {
  if (sdk) return;
  const instrumentations = [
    new HttpInstrumentation({
      ignoreIncomingRequestHook: (request: IncomingMessage) => UNTRACED.test(request.url ?? ''),
      // A stream token rides in the stream's query (docs/operations.md#stream-tokens): spans record it redacted.
      redactedQueryParamsServer: [...REDACTED_BY_DEFAULT, 'access_token'],
    }),
    new UndiciInstrumentation(),
    new PgInstrumentation({ requireParentSpan: true }),
  ];
  sdk = new NodeSDK({
    ...(env.serviceName ? {} : { serviceName: 'onejob' }),
    ...(options.exporter ? { spanProcessors: [new SimpleSpanProcessor(options.exporter)] } : {}),
    instrumentations,
  });
  sdk.start();
  const running = sdk;
  enableTracing(async () => {
    sdk = undefined;
    await running.shutdown();
    // Leave the process as it was (tests start and stop the SDK in a long-lived Jest worker).
    for (const instrumentation of instrumentations) instrumentation.disable();
    trace.disable();
    context.disable();
    propagation.disable();
  });
}
