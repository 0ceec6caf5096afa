import { Module } from '@nestjs/common';

import { LedgerModule } from '../ledger/ledger.module.js';
import { ProvidersModule } from '../providers/providers.module.js';
import { UsageModule } from '../usage/usage.module.js';
import { JobsIdempotency } from './idempotency.interceptor.js';
import { JobsController } from './jobs.controller.js';
import { JobsService } from './jobs.service.js';
import { WaitLimiter } from './wait-limiter.js';

@Module({
  imports: [LedgerModule, ProvidersModule, UsageModule],
  controllers: [JobsController],
  providers: [JobsService, WaitLimiter, JobsIdempotency],
})
export class JobsModule {}
