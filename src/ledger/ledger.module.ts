import { Module } from '@nestjs/common';

import { AttemptsRepository } from './attempts.repository.js';
import { BatchWriter } from './batch-writer.js';
import { BatchesRepository } from './batches.repository.js';
import { JobEventsRepository } from './job-events.repository.js';
import { JobSignals } from './job-signals.js';
import { JobsRepository } from './jobs.repository.js';
import { LedgerFactory } from './ledger.js';
import { SettlementRepository } from './settlement.repository.js';

/** The bottom of the graph: the jobs and attempts tables, their one writer, and the wake-ups between replicas. */
@Module({
  providers: [
    JobsRepository,
    AttemptsRepository,
    JobEventsRepository,
    SettlementRepository,
    BatchesRepository,
    BatchWriter,
    LedgerFactory,
    JobSignals,
  ],
  exports: [
    JobsRepository,
    AttemptsRepository,
    JobEventsRepository,
    BatchesRepository,
    BatchWriter,
    LedgerFactory,
    JobSignals,
  ],
})
export class LedgerModule {}
