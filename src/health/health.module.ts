import { Global, Module } from '@nestjs/common';

import { DatabaseProbeRepository } from './database-probe.repository.js';
import { HealthController } from './health.controller.js';
import { Lifecycle } from './lifecycle.js';
import { ReadinessService } from './readiness.service.js';

@Global()
@Module({
  controllers: [HealthController],
  providers: [Lifecycle, ReadinessService, DatabaseProbeRepository],
  exports: [Lifecycle],
})
export class HealthModule {}
