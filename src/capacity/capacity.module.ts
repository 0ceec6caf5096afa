import { Module } from '@nestjs/common';

import { CapacityRepository } from './capacity.repository.js';
import { CapacityGate } from './capacity-gate.js';
import { ProviderCapacity } from './provider-capacity.js';

/**
 * Provider capacity shared by every replica: over the ledger, whose claim transaction CapacityGate takes the
 * providers' locks and leases in; under the providers' API and the attempts, which read and record it.
 */
@Module({
  providers: [CapacityRepository, ProviderCapacity, CapacityGate],
  exports: [CapacityRepository, ProviderCapacity, CapacityGate],
})
export class CapacityModule {}
