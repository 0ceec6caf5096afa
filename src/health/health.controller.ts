import { Controller, Get, VERSION_NEUTRAL } from '@nestjs/common';
import { ApiOkResponse, ApiResponse, ApiTags } from '@nestjs/swagger';

import { Public } from '../auth/auth.decorators.js';
import { ApiPublicEndpoint, problemResponse } from '../common/api-docs.js';
import { type Readiness, ReadinessService } from './readiness.service.js';

@ApiTags('health')
@Public()
@Controller({ path: 'health', version: VERSION_NEUTRAL })
export class HealthController {
  constructor(private readonly readiness: ReadinessService) {}

  @Get('live')
  @ApiPublicEndpoint({ operationId: 'live', summary: 'Liveness: the process answers' })
  @ApiOkResponse({
    schema: { type: 'object', required: ['status'], properties: { status: { type: 'string', enum: ['ok'] } } },
  })
  live(): { status: 'ok' } {
    return { status: 'ok' };
  }

  @Get('ready')
  @ApiPublicEndpoint({
    operationId: 'ready',
    summary:
      'Readiness: started (migrations applied) and not shutting down; stays 200 through a database outage or a ' +
      'failover, `degraded` while no primary takes writes',
  })
  @ApiOkResponse({
    schema: {
      type: 'object',
      required: ['status', 'database'],
      additionalProperties: false,
      properties: {
        status: {
          type: 'string',
          enum: ['ready', 'degraded'],
          description: '`degraded` while the database does not take writes; `ready` again once a primary does',
        },
        database: {
          type: 'string',
          enum: ['up', 'unreachable', 'read_only'],
          description:
            'Whether a primary answered this probe within 1 s and took writes (`read_only`: a standby, or a primary ' +
            'demoted in place); requests answer 503 + Retry-After while it is not `up`',
        },
      },
    },
  })
  @ApiResponse({ status: 503, ...problemResponse(['service_unavailable']) })
  ready(): Promise<Readiness> {
    return this.readiness.check();
  }
}
