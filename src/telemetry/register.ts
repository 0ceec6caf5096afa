/**
 * The `--import` entry that turns tracing on before the application's modules load:
 *   node --import ./dist/src/telemetry/register.js dist/src/main.js   (what `npm start` and `start:prod` run)
 * An ESM application's imports can only be instrumented through a module hook registered before they are loaded,
 * hence a separate entry rather than a call in main.ts. With no OTEL_* configuration it loads nothing at all.
 */
import { loadTelemetryEnv } from '../config/telemetry-env.js';

const env = loadTelemetryEnv();
if (env.enabled) {
  const { register } = await import('node:module');
  register('@opentelemetry/instrumentation/hook.mjs', import.meta.url);
  const { startTelemetry } = await import('./telemetry.js');
  startTelemetry(env);
}
