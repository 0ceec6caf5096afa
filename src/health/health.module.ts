import { Global, Module } from '@nestjs/common';

import { DatabaseProbeRepository } from './database-probe.repository.js';
import { HealthController } from './health.controller.js';
import { Lifecycle } from './lifecycle.js';
import { PrimaryWatch } from './primary-watch.js';
import { ReadinessService } from './readiness.service.js';

@Global()
@Module({
  controllers: [HealthController],
  providers: [Lifecycle, ReadinessService, DatabaseProbeRepository, PrimaryWatch],
  exports: [Lifecycle, PrimaryWatch],
})
export class HealthModule {}
