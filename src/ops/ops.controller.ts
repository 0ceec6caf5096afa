import { Controller, Get, Param, Query } from '@nestjs/common';
import { ApiOkResponse, ApiTags } from '@nestjs/swagger';

import { CurrentPrincipal, RequireAnyScope, RequireScopes } from '../auth/auth.decorators.js';
import type { Principal } from '../auth/scopes.js';
import { ApiEndpoint } from '../common/api-docs.js';
import { UuidPipe } from '../common/uuid.pipe.js';
import { ListAttemptsQueryDto, ListEventsQueryDto, ListOpsJobsQueryDto, StatsQueryDto } from './ops.dto.js';
import { OpsService } from './ops.service.js';
import { JobEventPageView, OpsJobPageView, OpsJobView, OpsStatsView, WaitingAttemptPageView } from './ops.view.js';

const badQuery = { status: 400, codes: ['validation_failed'] };

/** The operators' surface (docs/operations.md#runbook-unknown-attempts) and the job timeline its owner also reads. */
@ApiTags('operations')
@Controller({ version: '1' })
export class OpsController {
  constructor(private readonly ops: OpsService) {}

  @Get('jobs/:id/events')
  @RequireAnyScope('jobs:read', 'ops:read')
  @ApiEndpoint({
    operationId: 'listJobEvents',
    summary: "A job's timeline: every transition with its reason, attempt, time and acting key (oldest first, keyset pages)",
    description: 'For the job\'s owner (`jobs:read`) and for operators (`ops:read`, any owner). Another owner\'s job answers 404.',
    problems: [badQuery, { status: 404, codes: ['not_found'] }],
  })
  @ApiOkResponse({ type: JobEventPageView })
  listJobEvents(
    @CurrentPrincipal() principal: Principal,
    @Param('id', UuidPipe) id: string,
    @Query() query: ListEventsQueryDto,
  ): Promise<JobEventPageView> {
    return this.ops.listEvents(principal, id, query);
  }

  @Get('ops/attempts')
  @RequireScopes('ops:read')
  @ApiEndpoint({
    operationId: 'listWaitingAttempts',
    summary: 'Attempts waiting for a decision, every owner, oldest deadline first (keyset pages)',
    description: 'Resolve one with POST /v1/attempts/{attemptId}/resolve (scope attempts:resolve).',
    problems: [badQuery],
  })
  @ApiOkResponse({ type: WaitingAttemptPageView })
  listWaitingAttempts(@Query() query: ListAttemptsQueryDto): Promise<WaitingAttemptPageView> {
    return this.ops.listWaitingAttempts(query);
  }

  @Get('ops/jobs/:id')
  @RequireScopes('ops:read')
  @ApiEndpoint({
    operationId: 'getAnyJob',
    summary: "Any owner's job with its attempts",
    problems: [badQuery, { status: 404, codes: ['not_found'] }],
  })
  @ApiOkResponse({ type: OpsJobView })
  getAnyJob(@Param('id', UuidPipe) id: string): Promise<OpsJobView> {
    return this.ops.findJob(id);
  }

  @Get('ops/jobs')
  @RequireScopes('ops:read')
  @ApiEndpoint({ operationId: 'listAnyJobs', summary: 'Jobs of every owner (or one), newest first (keyset pages)', problems: [badQuery] })
  @ApiOkResponse({ type: OpsJobPageView })
  listAnyJobs(@Query() query: ListOpsJobsQueryDto): Promise<OpsJobPageView> {
    return this.ops.listJobs(query);
  }

  @Get('ops/stats')
  @RequireScopes('ops:read')
  @ApiEndpoint({
    operationId: 'getOpsStats',
    summary: 'Per minute: jobs created and settled, attempt latency; per provider: what became of its attempts',
    problems: [badQuery],
  })
  @ApiOkResponse({ type: OpsStatsView })
  getOpsStats(@Query() query: StatsQueryDto): Promise<OpsStatsView> {
    return this.ops.stats(query.minutes);
  }
}
