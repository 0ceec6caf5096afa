import { type DynamicModule, Module } from '@nestjs/common';
import { ConfigModule, registerAs } from '@nestjs/config';
import { APP_FILTER, APP_INTERCEPTOR, APP_PIPE } from '@nestjs/core';

import { AttemptsModule } from './attempts/attempts.module.js';
import { AuthModule } from './auth/auth.module.js';
import { BatchesModule } from './batches/batches.module.js';
import { LoggingModule } from './common/logging.module.js';
import { ProblemDetailsFilter } from './common/problem-details.filter.js';
import { createValidationPipe } from './common/validation.js';
import { type Env, parseEnv } from './config/env.js';
import { DatabaseModule } from './database/database.module.js';
import { NotificationsModule } from './database/notifications.module.js';
import { ReadRetryInterceptor } from './database/read-retry.interceptor.js';
import { HealthModule } from './health/health.module.js';
import { JobsModule } from './jobs/jobs.module.js';
import { MetricsModule } from './metrics/metrics.module.js';
import { OpsModule } from './ops/ops.module.js';
import { ProvidersModule } from './providers/providers.module.js';
import { RetentionModule } from './retention/retention.module.js';
import { UsageModule } from './usage/usage.module.js';
import { WebhooksModule } from './webhooks/webhooks.module.js';

@Module({})
export class AppModule {
  /** `overrides` replace values read from the environment: tests and the embedded default use them. */
  static forRoot(overrides: Partial<Env> = {}): DynamicModule {
    return {
      module: AppModule,
      imports: [
        ConfigModule.forRoot({
          isGlobal: true,
          cache: true,
          ignoreEnvFile: true,
          load: [registerAs('app', () => ({ ...parseEnv(process.env), ...overrides }))],
        }),
        LoggingModule,
        DatabaseModule,
        NotificationsModule,
        HealthModule,
        MetricsModule,
        AuthModule,
        ProvidersModule,
        JobsModule,
        BatchesModule,
        AttemptsModule,
        OpsModule,
        WebhooksModule,
        RetentionModule,
        UsageModule,
      ],
      providers: [
        { provide: APP_FILTER, useClass: ProblemDetailsFilter },
        { provide: APP_PIPE, useFactory: createValidationPipe },
        { provide: APP_INTERCEPTOR, useClass: ReadRetryInterceptor },
      ],
    };
  }
}
