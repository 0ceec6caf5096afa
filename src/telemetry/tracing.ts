import {
  type Attributes,
  type Context,
  context,
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  trace,
} from '@opentelemetry/api';
import { W3CTraceContextPropagator } from '@opentelemetry/core';

/**
 * Domain spans (claim, attempt, provider call, settlement) and the trace context a job carries from the request that
 * created it to the worker that runs it. HTTP server and client spans and pg spans come from the SDK's
 * instrumentations (telemetry.ts); these helpers only add what no instrumentation can know. With tracing off
 * (no OTEL_* configuration) every helper is a plain call of its function.
 */
const tracer = trace.getTracer('onejob');
// Stored on jobs.trace_context in W3C form whatever OTEL_PROPAGATORS says, so any replica can read it.
const w3c = new W3CTraceContextPropagator();
let enabled = false;
let shutdown: () => Promise<void> = async () => undefined;

/** Called by startTelemetry once the SDK runs, with what flushes and stops it. */
export function enableTracing(stop: () => Promise<void>): void {
  enabled = true;
  shutdown = stop;
}

/** Flushes the spans still queued and stops the SDK; nothing when tracing is off. main.ts calls it before exiting. */
export async function shutdownTracing(): Promise<void> {
  enabled = false;
  const stop = shutdown;
  shutdown = async () => undefined;
  await stop().catch(() => undefined);
}

/** The W3C `traceparent` of the active span, for jobs.trace_context; null when tracing is off or nothing is traced. */
export function currentTraceparent(): string | null {
  if (!enabled || !trace.getActiveSpan()?.isRecording()) return null;
  const carrier: Record<string, string> = {};
  w3c.inject(context.active(), carrier, { set: (c, k, v) => (c[k] = v) });
  return carrier.traceparent ?? null;
}

function jobContext(traceparent: string | null | undefined): Context {
  if (!traceparent) return ROOT_CONTEXT;
  return w3c.extract(ROOT_CONTEXT, { traceparent }, { get: (c, k) => c[k], keys: (c) => Object.keys(c) });
}

async function inSpan<T>(
  name: string,
  attributes: Attributes,
  parent: Context,
  fn: () => Promise<T>,
  kind = SpanKind.INTERNAL,
): Promise<T> {
  return tracer.startActiveSpan(name, { attributes, kind }, parent, async (span) => {
    try {
      return await fn();
    } catch (error) {
      span.recordException(error as Error);
      span.setStatus({ code: SpanStatusCode.ERROR, message: (error as Error).message });
      throw error;
    } finally {
      span.end();
    }
  });
}

/** A domain step as a child of the active span. */
export function traced<T>(name: string, attributes: Attributes, fn: () => Promise<T>): Promise<T> {
  if (!enabled) return fn();
  return inSpan(name, attributes, context.active(), fn);
}

export interface JobTraceInfo {
  jobId: string;
  attemptId: string;
  provider: string;
  /** When the claim transaction began (Date.now()): its span is recorded only once it claimed something. */
  claimStartedAt: number;
}

/**
 * Runs a claimed attempt inside the trace of the request that created its job (jobs.trace_context): a `onejob.claim`
 * span for the claim transaction, then `onejob.attempt` around the run, both children of the request's span. A job
 * created untraced starts a trace of its own.
 */
export function inJobTrace<T>(
  job: { id: string; traceContext?: string | null },
  info: JobTraceInfo,
  fn: () => Promise<T>,
): Promise<T> {
  if (!enabled) return fn();
  const parent = jobContext(job.traceContext);
  const attributes = {
    'onejob.job_id': info.jobId,
    'onejob.attempt_id': info.attemptId,
    'onejob.provider': info.provider,
  };
  tracer.startSpan('onejob.claim', { attributes, startTime: info.claimStartedAt }, parent).end();
  return inSpan('onejob.attempt', attributes, parent, fn, SpanKind.CONSUMER);
}

/** The ids of the active span, for log lines: empty when nothing is traced. */
export function activeTraceIds(): { traceId?: string; spanId?: string } {
  if (!enabled) return {};
  const span = trace.getActiveSpan();
  if (!span?.isRecording()) return {};
  const { traceId, spanId } = span.spanContext();
  return { traceId, spanId };
}
