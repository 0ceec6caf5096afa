import { Logger, Module } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import { DataSource } from 'typeorm';

import { type AppConfig, appConfig } from '../config/app.config.js';
import { parsePostgresUrl } from '../config/postgres-url.js';
import { dataSourceOptions } from './data-source.options.js';
import { migrateOver } from './migrate.js';
import { isDatabaseUnavailable } from './pg-errors.js';
import { databaseEndpoint, sessionDatabaseUrl } from './session-url.js';

function requireDatabaseUrl(config: AppConfig): string {
  if (!config.databaseUrl) {
    throw new Error('Invalid environment variable DATABASE_URL: is required once the app starts');
  }
  return config.databaseUrl;
}

const STARTUP_ATTEMPTS = 10;
const STARTUP_RETRY_MS = 3000;

/**
 * Like TypeOrmModule's own retries: a database still starting (or a host that is slow to answer) is not fatal at boot.
 * A migration run cut off by an outage runs again: each migration is a transaction of its own.
 */
async function connectWithRetries<T>(connect: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await connect();
    } catch (error) {
      if (attempt >= STARTUP_ATTEMPTS || !isDatabaseUnavailable(error)) throw error;
      new Logger('Database').warn(
        `migration connection failed (${(error as Error).message}): retrying (${attempt}/${STARTUP_ATTEMPTS})`,
      );
      await new Promise((resolve) => setTimeout(resolve, STARTUP_RETRY_MS));
    }
  }
}

@Module({
  imports: [
    TypeOrmModule.forRootAsync({
      inject: [appConfig.KEY],
      useFactory: (config: AppConfig) => {
        const url = requireDatabaseUrl(config);
        const session = sessionDatabaseUrl(config)!;
        const how = config.databaseDirectUrl ? 'DATABASE_DIRECT_URL' : 'DATABASE_URL, as no DATABASE_DIRECT_URL is set';
        new Logger('Database').log(
          `queries and transactions: ${databaseEndpoint(url)} (DATABASE_URL, pool of ${config.dbPoolSize}, ` +
            `hot statements ${config.dbPreparedStatements ? 'named' : 'unnamed'}); ` +
            `migration lock and LISTEN: ${databaseEndpoint(session)} (${how})`,
        );
        for (const [name, value] of [
          ['DATABASE_URL', url],
          ['DATABASE_DIRECT_URL', config.databaseDirectUrl],
        ] as const) {
          const target = value ? parsePostgresUrl(value) : undefined;
          if (target && target.hosts.length > 1 && target.targetSessionAttrs === 'any') {
            new Logger('Database').warn(
              `${name} names several hosts with target_session_attrs=any: connections take the first that answers, ` +
                'a standby too; add target_session_attrs=read-write (docs/operations.md#failover)',
            );
          }
        }
        return dataSourceOptions({
          url,
          poolSize: config.dbPoolSize,
          queryTimeoutMs: config.dbQueryTimeoutMs,
          requestQueryTimeoutMs: config.dbRequestTimeoutMs,
          preparedStatements: config.dbPreparedStatements,
          applicationName: `onejob-${config.role}`,
        });
      },
      dataSourceFactory: async (options) => {
        const dataSource = await new DataSource(options!).initialize();
        return dataSource;
      },
    }),
  ],
  providers: [
    {
      // Migrations run under a session advisory lock (src/database/migrate.ts), so on a session connection of their
      // own, never through a transaction pooler (docs/operations.md#pgbouncer).
      provide: 'MIGRATIONS_APPLIED',
      // After the pool's DataSource (which TypeOrmModule retries while the database comes up).
      inject: [appConfig.KEY, DataSource],
      useFactory: async (config: AppConfig) => {
        if (!config.migrationsRun) return true;
        const url = sessionDatabaseUrl({ ...config, databaseUrl: requireDatabaseUrl(config) })!;
        await connectWithRetries(() => migrateOver(url, `onejob-${config.role}-migrate`));
        return true;
      },
    },
  ],
  exports: ['MIGRATIONS_APPLIED'],
})
export class DatabaseModule {}
