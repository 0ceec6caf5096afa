import { Module } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import { DataSource } from 'typeorm';
import { appConfig, type AppConfig } from '../config/app.config.js';
import { dataSourceOptions } from './data-source.options.js';
import { runMigrationsLocked } from './migrate.js';

@Module({
  imports: [
    TypeOrmModule.forRootAsync({
      inject: [appConfig.KEY],
      useFactory: (config: AppConfig) => {
        if (!config.databaseUrl) throw new Error('Invalid environment variable DATABASE_URL: is required once the app starts');
        return dataSourceOptions({ url: config.databaseUrl, poolSize: config.dbPoolSize, queryTimeoutMs: config.dbQueryTimeoutMs, applicationName: `onejob-${config.role}` });
      },
      dataSourceFactory: async (options) => {
        const dataSource = await new DataSource(options!).initialize();
        return dataSource;
      },
    }),
  ],
  providers: [
    {
      // Migrations run before anything that reads the schema is created (DESIGN §8: under an advisory lock).
      provide: 'MIGRATIONS_APPLIED',
      inject: [DataSource, appConfig.KEY],
      useFactory: async (dataSource: DataSource, config: AppConfig) => {
        if (config.migrationsRun) await runMigrationsLocked(dataSource);
        return true;
      },
    },
  ],
  exports: ['MIGRATIONS_APPLIED'],
})
export class DatabaseModule {}
