import { parseTelemetryEnv } from './telemetry-env.js';

describe('parseTelemetryEnv', () => {
  it('leaves tracing off when no OTEL_* variable names an exporter or an endpoint', () => {
    expect(parseTelemetryEnv({}).enabled).toBe(false);
    expect(parseTelemetryEnv({ OTEL_SERVICE_NAME: 'x' }).enabled).toBe(false);
  });

  it('turns tracing on for an OTLP endpoint or a named exporter', () => {
    expect(parseTelemetryEnv({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' }).enabled).toBe(true);
    expect(parseTelemetryEnv({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://collector:4318/v1/traces' }).enabled).toBe(
      true,
    );
    expect(parseTelemetryEnv({ OTEL_TRACES_EXPORTER: 'console' }).enabled).toBe(true);
  });

  it('keeps tracing off when OTEL_SDK_DISABLED is true or the traces exporter is none', () => {
    expect(parseTelemetryEnv({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_SDK_DISABLED: 'true' }).enabled).toBe(
      false,
    );
    expect(
      parseTelemetryEnv({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_TRACES_EXPORTER: 'none' }).enabled,
    ).toBe(false);
  });

  it('names the service onejob unless OTEL_SERVICE_NAME says otherwise', () => {
    expect(parseTelemetryEnv({}).serviceName).toBeUndefined();
    expect(parseTelemetryEnv({ OTEL_SERVICE_NAME: 'onejob-eu' }).serviceName).toBe('onejob-eu');
  });
});
