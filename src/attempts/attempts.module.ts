import { Module } from '@nestjs/common';

import { CapacityModule } from '../capacity/capacity.module.js';
import { LedgerModule } from '../ledger/ledger.module.js';
import { ProvidersModule } from '../providers/providers.module.js';
import { UsageModule } from '../usage/usage.module.js';
import { AttemptOutcomes } from './attempt-outcomes.js';
import { AttemptRunner } from './attempt-runner.js';
import { AttemptScheduler } from './attempt-scheduler.js';
import { AttemptWorker } from './attempt-worker.js';
import { AttemptsController } from './attempts.controller.js';
import { AttemptsService } from './attempts.service.js';
import { Reconciler } from './reconciler.js';

@Module({
  imports: [CapacityModule, LedgerModule, ProvidersModule, UsageModule],
  controllers: [AttemptsController],
  providers: [AttemptScheduler, AttemptOutcomes, AttemptRunner, AttemptWorker, Reconciler, AttemptsService],
  exports: [AttemptWorker, Reconciler, AttemptOutcomes],
})
export class AttemptsModule {}
