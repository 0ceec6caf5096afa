import { Module, RequestMethod } from '@nestjs/common';
import { LoggerModule } from 'nestjs-pino';
import { appConfig, type AppConfig } from '../config/app.config.js';

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
        pinoHttp: { level: config.logLevel, autoLogging: false },
        // No route takes the pino-http middleware (see above): the path below names no route of the API.
        forRoutes: [{ path: 'pino-http-middleware-unused', method: RequestMethod.ALL }],
      }),
    }),
  ],
})
export class LoggingModule {}
