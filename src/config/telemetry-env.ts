/**
 * OpenTelemetry is configured by its standard OTEL_* variables only (docs/operations.md#tracing). This decides the
 * one thing onejob must know before loading the SDK: whether to load it at all. Everything else (exporter, endpoint,
 * headers, sampler, resource attributes) the SDK reads itself.
 */
export interface TelemetryEnv {
  /** True when an exporter is named or an OTLP endpoint is given, and OTEL_SDK_DISABLED is not true. */
  enabled: boolean;
  /** OTEL_SERVICE_NAME, or undefined (then the service calls itself onejob). */
  serviceName: string | undefined;
}

type Source = Record<string, string | undefined>;

const set = (value: string | undefined) => value !== undefined && value.trim() !== '';

export function parseTelemetryEnv(source: Source): TelemetryEnv {
  const disabled = source.OTEL_SDK_DISABLED?.trim().toLowerCase() === 'true';
  const exporter = source.OTEL_TRACES_EXPORTER?.trim().toLowerCase();
  const named = set(exporter) && exporter !== 'none';
  const endpoint = set(source.OTEL_EXPORTER_OTLP_ENDPOINT) || set(source.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT);
  return {
    enabled: !disabled && exporter !== 'none' && (named || endpoint),
    serviceName: set(source.OTEL_SERVICE_NAME) ? source.OTEL_SERVICE_NAME : undefined,
  };
}

export function loadTelemetryEnv(): TelemetryEnv {
  return parseTelemetryEnv(process.env);
}
