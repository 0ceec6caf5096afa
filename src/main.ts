import 'reflect-metadata';

import { chmodSync, existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

import { Logger } from '@nestjs/common';

import { createApp } from './app.setup.js';
import { ApiKeysService } from './auth/api-keys.service.js';
import { SCOPES } from './auth/scopes.js';
import { loadEnv } from './config/app.config.js';
import { recordRunningEmbedded } from './database/database-url.js';
import { type EmbeddedDatabase, startEmbeddedPostgres } from './database/embedded-postgres.js';
import { Lifecycle } from './health/lifecycle.js';
import { shutdownTracing } from './telemetry/tracing.js';

const DEMO_KEY_FILE = 'demo-api-key';

/**
 * The embedded database's first start makes a demo key with every scope, prints it once alone on a line of stdout,
 * and keeps it in DATA_DIR/demo-api-key (mode 0600, like the database password beside it), so a later start can
 * say where it is. A key made or revoked by hand leaves the file as it was.
 */
async function announceDemoKey(keys: ApiKeysService, dataDir: string, logger: Logger): Promise<void> {
  const file = join(dataDir, DEMO_KEY_FILE);
  const first = await keys.createFirst('demo', [...SCOPES]);
  if (first) {
    writeFileSync(file, `${first.key}\n`, { mode: 0o600 });
    chmodSync(file, 0o600);
    logger.log(
      'First start of the embedded database: created a demo API key with every scope (owner "demo"), ' +
        `kept in ${file}. It is shown once:`,
    );
    process.stdout.write(`${first.key}\n`);
  } else if (existsSync(file)) {
    logger.log(`The demo API key made at the first start is in ${file} (npm run apikey -- list shows every key)`);
  }
}

async function bootstrap(): Promise<void> {
  const logger = new Logger('Bootstrap');
  const env = loadEnv();
  // A signal is ours from the first step: Node's default ends the process at once, which would leave the embedded
  // PostgreSQL running (an orphan the next start must stop). Until the app exists a signal only stops what started.
  let requested: NodeJS.Signals | undefined;
  let onSignal: (signal: NodeJS.Signals) => void = (signal) => (requested ??= signal);
  process.on('SIGTERM', (signal) => onSignal(signal));
  process.on('SIGINT', (signal) => onSignal(signal));
  let embedded: EmbeddedDatabase | undefined;
  let forgetEmbedded = () => undefined as void;
  const stopEarly = (signal: NodeJS.Signals) => {
    logger.log(`${signal} received while starting: stopping`);
    forgetEmbedded();
    void Promise.resolve(embedded?.stop()).finally(() => process.exit(0));
  };
  if (!env.databaseUrl) {
    embedded = await startEmbeddedPostgres({
      dataDir: env.dataDir,
      database: 'onejob',
      notice: (line) => logger.warn(line),
    });
    forgetEmbedded = recordRunningEmbedded(env.dataDir, embedded.url);
    logger.log(`DATABASE_URL is unset: started an embedded PostgreSQL in ${env.dataDir}`);
  }
  if (requested) return stopEarly(requested);
  onSignal = stopEarly;
  try {
    const app = await createApp(embedded ? { databaseUrl: embedded.url } : {});
    // SIGTERM/SIGINT: readiness false, stop accepting and claiming, let in-flight attempts finish (within
    // SHUTDOWN_GRACE_MS), close the pool, stop the embedded database, exit 0.
    let closing = false;
    onSignal = (signal) => {
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
        .then(() => shutdownTracing())
        .then(
          () => process.exit(0),
          (error: Error) => {
            logger.error(`shutdown failed: ${error.message}`);
            process.exit(1);
          },
        );
    };
    await app.listen({ port: env.port, host: env.host });
    logger.log(`onejob (${env.role}) listening on http://${env.host}:${env.port} — Swagger UI at /docs`);
    // After the port is bound: a start that fails on a taken port has made no key it could not show.
    if (embedded) await announceDemoKey(app.get(ApiKeysService), env.dataDir, logger);
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
