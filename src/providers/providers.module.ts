import { Module } from '@nestjs/common';
import { catalogProvider, CatalogService } from './catalog.service.js';

@Module({
  providers: [catalogProvider, CatalogService],
  exports: [CatalogService],
})
export class ProvidersModule {}
