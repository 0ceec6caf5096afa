import { Module } from '@nestjs/common';
import { ProvidersModule } from '../providers/providers.module.js';
import { CostMeter } from './cost-meter.js';
import { UsageController } from './usage.controller.js';
import { UsageRepository } from './usage.repository.js';
import { UsageService } from './usage.service.js';

@Module({
  imports: [ProvidersModule],
  controllers: [UsageController],
  providers: [UsageRepository, UsageService, CostMeter],
  exports: [CostMeter],
})
export class UsageModule {}
