import { Global, Inject, Injectable, type LoggerService, Module } from '@nestjs/common';
import { type Logger as Pino, pino } from 'pino';

import { type AppConfig, appConfig } from '../config/app.config.js';
import { currentRequestId } from '../database/request-context.js';
import { activeTraceIds } from '../telemetry/tracing.js';

/** Every line written while serving a request, or inside a traced job, says which (docs/operations.md#logs). */
function logContext(): Record<string, string> {
  const requestId = currentRequestId();
  return requestId ? { requestId, ...activeTraceIds() } : activeTraceIds();
}

type Level = 'trace' | 'debug' | 'info' | 'warn' | 'error' | 'fatal';

/**
 * Nest's logger over pino: JSON lines, `context` from Nest's `new Logger(name)`, objects merged into the line.
 * Written here rather than taken from nestjs-pino, whose releases for Nest 12 require Node 22.12 while the
 * project supports Node 20.19 (package.json engines); its request middleware was off anyway: the one line per
 * request is a Fastify onResponse hook (configureApp), measured with `npm run bench` at about 15% of GET
 * throughput cheaper than pino-http as Nest middleware.
 */
@Injectable()
export class AppLogger implements LoggerService {
  readonly pino: Pino;

  constructor(@Inject(appConfig.KEY) config: AppConfig) {
    this.pino = pino({ level: config.logLevel, mixin: logContext });
  }

  verbose(message: unknown, ...params: unknown[]): void {
    this.write('trace', message, params);
  }
  debug(message: unknown, ...params: unknown[]): void {
    this.write('debug', message, params);
  }
  log(message: unknown, ...params: unknown[]): void {
    this.write('info', message, params);
  }
  warn(message: unknown, ...params: unknown[]): void {
    this.write('warn', message, params);
  }
  error(message: unknown, ...params: unknown[]): void {
    this.write('error', message, params);
  }
  fatal(message: unknown, ...params: unknown[]): void {
    this.write('fatal', message, params);
  }

  /** Nest appends the logger's context as the last parameter; anything between is a message argument or a stack. */
  private write(level: Level, message: unknown, params: unknown[]): void {
    const fields: Record<string, unknown> = {};
    const rest = params.length ? params.slice(0, -1) : [];
    if (params.length) fields.context = params[params.length - 1];
    if (message instanceof Error) {
      this.pino[level]({ ...fields, err: message }, ...(rest as []));
    } else if (typeof message === 'object' && message !== null) {
      this.pino[level]({ ...fields, ...message }, ...(rest as []));
    } else if (level === 'error' && rest.length === 1 && typeof rest[0] === 'string' && /\n\s*at /.test(rest[0])) {
      // Nest's own exception handlers call error(message, stack, context).
      const err = Object.assign(new Error(String(message)), { stack: rest[0] });
      this.pino[level]({ ...fields, err });
    } else {
      this.pino[level](fields, String(message), ...(rest as []));
    }
  }
}

@Global()
@Module({ providers: [AppLogger], exports: [AppLogger] })
export class LoggingModule {}
