import { Module } from '@nestjs/common';

import { ProvidersModule } from '../providers/providers.module.js';
import { BudgetController } from './budget.controller.js';
import { BudgetsRepository } from './budgets.repository.js';
import { BudgetsService } from './budgets.service.js';
import { CostMeter } from './cost-meter.js';
import { UsageController } from './usage.controller.js';
import { UsageRepository } from './usage.repository.js';
import { UsageService } from './usage.service.js';

@Module({
  imports: [ProvidersModule],
  controllers: [UsageController, BudgetController],
  providers: [UsageRepository, UsageService, CostMeter, BudgetsRepository, BudgetsService],
  exports: [CostMeter, BudgetsService],
})
export class UsageModule {}
