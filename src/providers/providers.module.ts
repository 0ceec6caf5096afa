import { Module } from '@nestjs/common';

import { CapacityModule } from '../capacity/capacity.module.js';
import { catalogProvider, CatalogService } from './catalog.service.js';
import { CertificationRepository } from './certification.repository.js';
import { CertificationService } from './certification.service.js';
import { ProviderRegistry, providerRegistryProvider } from './provider-registry.js';
import { ProvidersController } from './providers.controller.js';
import { ProvidersService } from './providers.service.js';
import { Recertifier } from './recertifier.js';

@Module({
  imports: [CapacityModule],
  controllers: [ProvidersController],
  providers: [
    catalogProvider,
    CatalogService,
    providerRegistryProvider,
    CertificationRepository,
    CertificationService,
    ProvidersService,
    Recertifier,
  ],
  exports: [CatalogService, ProviderRegistry, CertificationService, Recertifier],
})
export class ProvidersModule {}
