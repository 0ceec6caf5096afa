import { Global, Module } from '@nestjs/common';

import { BacklogRepository } from './backlog.repository.js';
import { BacklogSampler } from './backlog-sampler.js';
import { MetricsController } from './metrics.controller.js';
import { MetricsService } from './metrics.service.js';
import { MetricsListener } from './metrics-listener.js';

@Global()
@Module({
  controllers: [MetricsController],
  providers: [MetricsService, MetricsListener, BacklogRepository, BacklogSampler],
  exports: [MetricsService],
})
export class MetricsModule {}
