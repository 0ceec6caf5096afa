import { Controller, Get, Header, VERSION_NEUTRAL } from '@nestjs/common';
import { ApiOkResponse, ApiTags } from '@nestjs/swagger';

import { Public } from '../auth/auth.decorators.js';
import { ApiPublicEndpoint } from '../common/api-docs.js';
import { MetricsService } from './metrics.service.js';

@ApiTags('health')
@Public()
@Controller({ path: 'metrics', version: VERSION_NEUTRAL })
export class MetricsController {
  constructor(private readonly metrics: MetricsService) {}

  @Get()
  @Header('Content-Type', 'text/plain; version=0.0.4; charset=utf-8')
  @ApiPublicEndpoint({ operationId: 'metrics', summary: 'Prometheus metrics' })
  @ApiOkResponse({ content: { 'text/plain': { schema: { type: 'string' } } } })
  metricsText(): Promise<string> {
    return this.metrics.registry.metrics();
  }
}
