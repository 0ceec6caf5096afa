import { Module } from '@nestjs/common';

import { AuthModule } from '../auth/auth.module.js';
import { LedgerModule } from '../ledger/ledger.module.js';
import { ProvidersModule } from '../providers/providers.module.js';
import { StreamsModule } from '../streams/streams.module.js';
import { UsageModule } from '../usage/usage.module.js';
import { BatchAdmission } from './batch-admission.js';
import { BatchesController } from './batches.controller.js';
import { BatchesIdempotency } from './batches.idempotency.js';
import { BatchesService } from './batches.service.js';

@Module({
  imports: [AuthModule, LedgerModule, ProvidersModule, StreamsModule, UsageModule],
  controllers: [BatchesController],
  providers: [BatchesService, BatchesIdempotency, BatchAdmission],
})
export class BatchesModule {}
