import 'reflect-metadata';
import { Logger } from '@nestjs/common';
import { createApp } from './app.setup.js';
import { ApiKeysService } from './auth/api-keys.service.js';
import { SCOPES } from './auth/scopes.js';
import { loadEnv } from './config/app.config.js';
import { recordRunningEmbedded } from './database/database-url.js';
import { Lifecycle } from './health/lifecycle.js';
import { startEmbeddedPostgres, type EmbeddedDatabase } from './database/embedded-postgres.js';

async function bootstrap(): Promise<void> {
  const logger = new Logger('Bootstrap');
  const env = loadEnv();
  let embedded: EmbeddedDatabase | undefined;
  let forgetEmbedded = () => undefined as void;
  if (!env.databaseUrl) {
    embedded = await startEmbeddedPostgres({ dataDir: env.dataDir, database: 'onejob', notice: (line) => logger.warn(line) });
    forgetEmbedded = recordRunningEmbedded(env.dataDir, embedded.url);
    logger.log(`DATABASE_URL is unset: started an embedded PostgreSQL in ${env.dataDir}`);
  }
  try {
    const app = await createApp(embedded ? { databaseUrl: embedded.url } : {});
    if (embedded) {
      const keys = app.get(ApiKeysService);
      if ((await keys.countKeys()) === 0) {
        const { key } = await keys.create('demo', [...SCOPES]);
        logger.log('First start of the embedded database: created a demo API key with every scope (owner "demo"). It is shown once:');
        process.stdout.write(`${key}\n`);
      }
    }
    await app.listen({ port: env.port, host: env.host });
    logger.log(`onejob (${env.role}) listening on http://${env.host}:${env.port} — Swagger UI at /docs`);
    // SIGTERM/SIGINT: readiness false, stop accepting and claiming, let in-flight attempts finish (within
    // SHUTDOWN_GRACE_MS), close the pool, stop the embedded database, exit 0.
    let closing = false;
    const shutdown = (signal: NodeJS.Signals) => {
      if (closing) return;
      closing = true;
      logger.log(`${signal} received: shutting down`);
      // Readiness false and no new connections first; then workers stop claiming and drain (app.close).
      app.get(Lifecycle).shuttingDown = true;
      app.getHttpServer().close();
      app.getHttpServer().closeIdleConnections();
      app
        .close()
        .then(() => forgetEmbedded())
        .then(() => embedded?.stop())
        .then(
          () => process.exit(0),
          (error: Error) => {
            logger.error(`shutdown failed: ${error.message}`);
            process.exit(1);
          },
        );
    };
    process.once('SIGTERM', shutdown);
    process.once('SIGINT', shutdown);
  } catch (error) {
    forgetEmbedded();
    await embedded?.stop();
    throw error;
  }
}

bootstrap().catch((error: unknown) => {
  process.stderr.write(`onejob failed to start: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exit(1);
});
