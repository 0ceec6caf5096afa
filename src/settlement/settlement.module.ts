import { Module } from '@nestjs/common';
import { AttemptsRepository } from '../attempts/attempts.repository.js';
import { JobsModule } from '../jobs/jobs.module.js';
import { LedgerFactory } from './ledger.js';
import { SettlementRepository } from './settlement.repository.js';
import { SettlementService } from './settlement.service.js';

@Module({
  imports: [JobsModule],
  providers: [AttemptsRepository, LedgerFactory, SettlementRepository, SettlementService],
  exports: [AttemptsRepository, LedgerFactory, SettlementService],
})
export class SettlementModule {}
