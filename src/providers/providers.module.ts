import { Module } from '@nestjs/common';

import { CapacityModule } from '../capacity/capacity.module.js';
import { catalogProvider, CatalogService } from './catalog.service.js';
import { CertificationRepository } from './certification.repository.js';
import { CertificationService } from './certification.service.js';
import { ProviderRegistry, providerRegistryProvider } from './provider-registry.js';
import { ProvidersController } from './providers.controller.js';
import { ProvidersService } from './providers.service.js';

@Module({
  imports: [CapacityModule],
  controllers: [ProvidersController],
  providers: [catalogProvider, CatalogService, providerRegistryProvider, CertificationRepository, CertificationService, ProvidersService],
  exports: [CatalogService, ProviderRegistry, CertificationService],
})
export class ProvidersModule {}
