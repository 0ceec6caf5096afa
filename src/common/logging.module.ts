import type { IncomingMessage, ServerResponse } from 'node:http';
import { Module, RequestMethod } from '@nestjs/common';
import { LoggerModule } from 'nestjs-pino';
import { appConfig, type AppConfig } from '../config/app.config.js';

type LoggedRequest = IncomingMessage & { id?: string; route?: string };

/**
 * JSON logs (pino): one line per request with method, route, status, latency and request id; log lines written
 * while a request is handled carry its request id. API keys and cookies are never logged.
 */
@Module({
  imports: [
    LoggerModule.forRootAsync({
      inject: [appConfig.KEY],
      useFactory: (config: AppConfig) => ({
        pinoHttp: {
          level: config.logLevel,
          // The id Fastify gave the request (X-Request-Id when sane), set on the raw request by createAdapter.
          genReqId: (req: LoggedRequest) => req.id ?? 'unknown',
          customAttributeKeys: { responseTime: 'latencyMs' },
          serializers: {
            req: (req: { id?: string; method?: string; url?: string }) => ({ method: req.method, url: req.url?.split('?')[0] }),
            res: (res: { statusCode?: number }) => ({ status: res.statusCode }),
          },
          customSuccessObject: (req: LoggedRequest, res: ServerResponse, value: Record<string, unknown>) => ({ ...value, requestId: req.id, route: req.route ?? null, status: res.statusCode }),
          customErrorObject: (req: LoggedRequest, res: ServerResponse, _error: Error, value: Record<string, unknown>) => ({ ...value, requestId: req.id, route: req.route ?? null, status: res.statusCode }),
          customSuccessMessage: () => 'request completed',
          customErrorMessage: () => 'request failed',
          redact: { paths: ['req.headers.authorization', 'req.headers.cookie', 'headers.authorization'], remove: true },
        },
        // Health probes and scrapes every few seconds would drown the log.
        // nestjs-pino's default route pattern does not match URI-versioned routes: name every path.
        forRoutes: ['{*splat}'],
        exclude: [
          { method: RequestMethod.ALL, path: 'health/{*rest}' },
          { method: RequestMethod.ALL, path: 'metrics' },
        ],
      }),
    }),
  ],
})
export class LoggingModule {}
