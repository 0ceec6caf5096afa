import { Controller, Get, Inject, VERSION_NEUTRAL } from '@nestjs/common';
import { ApiOkResponse, ApiResponse, ApiTags } from '@nestjs/swagger';
import { DataSource } from 'typeorm';

import { Public } from '../auth/auth.decorators.js';
import { ApiPublicEndpoint, problemResponse } from '../common/api-docs.js';
import { DomainError } from '../common/domain.errors.js';
import { migrationsApplied } from '../database/migrate.js';
import { Lifecycle } from './lifecycle.js';

class NotReadyError extends DomainError {
  constructor(why: string) {
    super('service_unavailable', 503, why);
  }
}

@ApiTags('health')
@Public()
@Controller({ path: 'health', version: VERSION_NEUTRAL })
export class HealthController {
  constructor(
    private readonly dataSource: DataSource,
    @Inject(Lifecycle) private readonly lifecycle: Lifecycle,
  ) {}

  @Get('live')
  @ApiPublicEndpoint({ operationId: 'live', summary: 'Liveness: the process answers' })
  @ApiOkResponse({ schema: { type: 'object', required: ['status'], properties: { status: { type: 'string', enum: ['ok'] } } } })
  live(): { status: 'ok' } {
    return { status: 'ok' };
  }

  @Get('ready')
  @ApiPublicEndpoint({ operationId: 'ready', summary: 'Readiness: database reachable, migrations applied, not shutting down' })
  @ApiOkResponse({ schema: { type: 'object', required: ['status'], properties: { status: { type: 'string', enum: ['ready'] } } } })
  @ApiResponse({ status: 503, ...problemResponse(['service_unavailable']) })
  async ready(): Promise<{ status: 'ready' }> {
    if (this.lifecycle.shuttingDown) throw new NotReadyError('The service is shutting down.');
    await this.dataSource.query('SELECT 1');
    if (!(await migrationsApplied(this.dataSource))) throw new NotReadyError('Database migrations are pending.');
    return { status: 'ready' };
  }
}
