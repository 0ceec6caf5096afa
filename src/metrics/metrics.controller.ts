import { Controller, Get, Header, Inject, VERSION_NEUTRAL } from '@nestjs/common';
import { ApiOkResponse, ApiResponse, ApiTags } from '@nestjs/swagger';

import { Public } from '../auth/auth.decorators.js';
import { ApiPublicEndpoint, problemResponse } from '../common/api-docs.js';
import { DomainError } from '../common/domain.errors.js';
import { type AppConfig, appConfig } from '../config/app.config.js';
import { MetricsService } from './metrics.service.js';

@ApiTags('health')
@Public()
@Controller({ path: 'metrics', version: VERSION_NEUTRAL })
export class MetricsController {
  constructor(
    private readonly metrics: MetricsService,
    @Inject(appConfig.KEY) private readonly config: AppConfig,
  ) {}

  @Get()
  @Header('Content-Type', 'text/plain; version=0.0.4; charset=utf-8')
  @ApiPublicEndpoint({
    operationId: 'metrics',
    summary: 'Prometheus metrics (on METRICS_PORT instead, when that is set)',
  })
  @ApiOkResponse({ content: { 'text/plain': { schema: { type: 'string' } } } })
  @ApiResponse({ status: 404, ...problemResponse(['not_found']) })
  metricsText(): Promise<string> {
    if (this.config.metricsPort !== undefined) {
      throw new DomainError('not_found', 404, 'Metrics are served on METRICS_PORT, not on this port.');
    }
    return this.metrics.registry.metrics();
  }
}
