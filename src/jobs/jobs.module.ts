import { Module } from '@nestjs/common';
import { ProvidersModule } from '../providers/providers.module.js';
import { SettlementModule } from '../settlement/settlement.module.js';
import { IdempotencyInterceptor } from './idempotency.interceptor.js';
import { JobsDataModule } from './jobs-data.module.js';
import { JobsController } from './jobs.controller.js';
import { JobsService } from './jobs.service.js';

@Module({
  imports: [JobsDataModule, ProvidersModule, SettlementModule],
  controllers: [JobsController],
  providers: [JobsService, IdempotencyInterceptor],
})
export class JobsModule {}
