import { Module } from '@nestjs/common';

import { CapacityRepository } from './capacity.repository.js';
import { ProviderCapacity } from './provider-capacity.js';

/** Provider capacity shared by every replica: below the ledger, which takes leases in its claim transactions. */
@Module({
  providers: [CapacityRepository, ProviderCapacity],
  exports: [CapacityRepository, ProviderCapacity],
})
export class CapacityModule {}
