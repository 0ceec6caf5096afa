import { Module } from '@nestjs/common';
import { JobsDataModule } from '../jobs/jobs-data.module.js';
import { LedgerFactory } from './ledger.js';
import { SettlementRepository } from './settlement.repository.js';
import { SettlementService } from './settlement.service.js';

@Module({
  imports: [JobsDataModule],
  providers: [LedgerFactory, SettlementRepository, SettlementService],
  exports: [LedgerFactory, SettlementService],
})
export class SettlementModule {}
