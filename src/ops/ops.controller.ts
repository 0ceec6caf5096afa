import { Controller, Get, Headers, HttpCode, Param, Post, Query, Res } from '@nestjs/common';
import { ApiCreatedResponse, ApiOkResponse, ApiTags } from '@nestjs/swagger';
import type { FastifyReply } from 'fastify';

import { AcceptsStreamToken, CurrentPrincipal, RequireAnyScope, RequireScopes } from '../auth/auth.decorators.js';
import type { Principal } from '../auth/scopes.js';
import { StreamTokenView } from '../auth/stream-token.view.js';
import { ApiEndpoint, ApiJsonOrEventStream } from '../common/api-docs.js';
import { resumeAfter } from '../common/event-ids.js';
import { UuidPipe } from '../common/uuid.pipe.js';
import { sendEventStream, wantsEventStream } from '../streams/event-stream-reply.js';
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
  @AcceptsStreamToken('job')
  @ApiEndpoint({
    operationId: 'listJobEvents',
    summary:
      "A job's timeline: every transition with its reason, attempt, time and acting key (oldest first, keyset pages)",
    description:
      "For the job's owner (`jobs:read`) and for operators (`ops:read`, any owner). Another owner's job answers " +
      '404. With `Accept: text/event-stream`, a live stream: the timeline so far, then each event as it commits, ' +
      'one message per event (`id:` the event id, `event:` subject.to, `data:` the event as in the pages), a ' +
      '`: heartbeat` comment every STREAM_HEARTBEAT_MS; it ends STREAM_GRACE_MS after the terminal event. Resume ' +
      'with `Last-Event-ID` (or `?lastEventId=`): no gap, no repeat. 503 with Retry-After past MAX_STREAMS or ' +
      'MAX_STREAMS_PER_OWNER. A browser that cannot send Authorization (EventSource) opens the stream with ' +
      '`?access_token=` and a stream token for this job (POST /v1/jobs/{id}/stream-tokens); the stream ends when ' +
      'the credential that opened it expires or is revoked.',
    problems: [badQuery, { status: 404, codes: ['not_found'] }],
  })
  @ApiJsonOrEventStream(JobEventPageView, {
    json: 'A page of the timeline.',
    stream: 'the live timeline.',
    example: 'retry: 1000\n\nid: 41\nevent: attempt.running\ndata: {"id":"41","at":"2026-12-01T18:00:00.000Z",...}\n\n',
  })
  async listJobEvents(
    @CurrentPrincipal() principal: Principal,
    @Param('id', UuidPipe) id: string,
    @Query() query: ListEventsQueryDto,
    @Headers('accept') accept: string | undefined,
    @Headers('last-event-id') lastEventId: string | undefined,
    @Res() reply: FastifyReply,
  ): Promise<void> {
    const after = resumeAfter(query.lastEventId, lastEventId);
    if (!wantsEventStream(accept)) return void reply.send(await this.ops.listEvents(principal, id, query));
    sendEventStream(reply, await this.ops.streamEvents(principal, id, after));
  }

  @Post('jobs/:id/stream-tokens')
  @HttpCode(201)
  @RequireAnyScope('jobs:read', 'ops:read')
  @ApiEndpoint({
    operationId: 'createJobStreamToken',
    summary: "A token that opens this job's live stream, and nothing else, for at most 15 minutes",
    description:
      "For the job's owner (`jobs:read`) and operators (`ops:read`, any owner); another owner's job answers 404. " +
      'Give `url` to EventSource: the token is accepted only as `?access_token=` on GET /v1/jobs/{id}/events with ' +
      '`Accept: text/event-stream`, lives STREAM_TOKEN_TTL_SECONDS (at most 900) and never past the credential ' +
      'that asked for it, and is refused once the key that asked for it is revoked.',
    problems: [badQuery, { status: 404, codes: ['not_found'] }],
  })
  @ApiCreatedResponse({ type: StreamTokenView })
  createJobStreamToken(
    @CurrentPrincipal() principal: Principal,
    @Param('id', UuidPipe) id: string,
  ): Promise<StreamTokenView> {
    return this.ops.issueStreamToken(principal, id);
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
  @ApiEndpoint({
    operationId: 'listAnyJobs',
    summary: 'Jobs of every owner (or one), newest first (keyset pages)',
    problems: [badQuery],
  })
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
