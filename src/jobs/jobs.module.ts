import { Module } from '@nestjs/common';
import { ProvidersModule } from '../providers/providers.module.js';
import { IdempotencyInterceptor } from './idempotency.interceptor.js';
import { JobEventsRepository } from './job-events.repository.js';
import { JobWatch } from './job-watch.js';
import { JobsController } from './jobs.controller.js';
import { JobsRepository } from './jobs.repository.js';
import { JobsService } from './jobs.service.js';

@Module({
  imports: [ProvidersModule],
  controllers: [JobsController],
  providers: [JobsRepository, JobEventsRepository, JobsService, JobWatch, IdempotencyInterceptor],
  exports: [JobsRepository, JobEventsRepository, JobWatch],
})
export class JobsModule {}
