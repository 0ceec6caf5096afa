import { Module, RequestMethod } from '@nestjs/common';
import { LoggerModule } from 'nestjs-pino';
import { appConfig, type AppConfig } from '../config/app.config.js';
import { activeTraceIds } from '../telemetry/tracing.js';
import { currentRequestId } from './request-context.js';

/** Every line written while serving a request, or inside a traced job, says which (docs/operations.md#logs). */
function logContext(): Record<string, string> {
  const requestId = currentRequestId();
  return requestId ? { requestId, ...activeTraceIds() } : activeTraceIds();
}

/**
 * JSON logs through pino (nestjs-pino is Nest's logger). The one line per request is written by a Fastify
 * onResponse hook (configureApp), not by pino-http as Nest middleware: measured with `npm run bench`, the
 * middleware path (middie, a child logger per request) cost about 15% of GET throughput.
 */
@Module({
  imports: [
    LoggerModule.forRootAsync({
      inject: [appConfig.KEY],
      useFactory: (config: AppConfig) => ({
        pinoHttp: { level: config.logLevel, autoLogging: false, mixin: logContext },
        // No route takes the pino-http middleware (see above): the path below names no route of the API.
        forRoutes: [{ path: 'pino-http-middleware-unused', method: RequestMethod.ALL }],
      }),
    }),
  ],
})
export class LoggingModule {}
