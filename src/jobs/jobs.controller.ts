import { Body, Controller, Get, HttpCode, Param, Post, Query, Res, UseInterceptors } from '@nestjs/common';
import { ApiCreatedResponse, ApiHeader, ApiOkResponse, ApiParam, ApiTags } from '@nestjs/swagger';
import type { FastifyReply } from 'fastify';

import { OwnerId, RequireScopes } from '../auth/auth.decorators.js';
import { ApiEndpoint, headerRef } from '../common/api-docs.js';
import { UuidPipe } from '../common/uuid.pipe.js';
import { JobsIdempotency } from './idempotency.interceptor.js';
import { JobPageView, JobView, toJobSummaryView, toJobView } from './job.view.js';
import { sendJob } from './job-reply.js';
import { CreateJobDto, ListJobsQueryDto } from './jobs.dto.js';
import { JobsService } from './jobs.service.js';
import { clientGoneSignal, IdempotencyKey, MAX_IDEMPOTENCY_KEY_LENGTH, PreferWait } from './request-headers.js';

const preferHeader = ApiHeader({
  name: 'Prefer',
  required: false,
  description:
    'wait=N (N ≤ 30): hold the answer until the job is terminal or N seconds pass. Answered with Preference-Applied.',
  schema: { type: 'string', example: 'wait=10' },
});
const jobId = ApiParam({ name: 'id', description: 'A job id.', schema: { type: 'string', format: 'uuid' } });
const jobHeaders = { Location: headerRef('Location'), 'Preference-Applied': headerRef('PreferenceApplied') };

@ApiTags('jobs')
@Controller({ path: 'jobs', version: '1' })
export class JobsController {
  constructor(private readonly jobs: JobsService) {}

  @Post()
  @RequireScopes('jobs:write')
  // A key taken already is answered by JobsIdempotency: the replay, or 409.
  @UseInterceptors(JobsIdempotency)
  @ApiHeader({
    name: 'Idempotency-Key',
    required: true,
    description:
      '1-255 visible ASCII characters (0x21-0x7E), chosen by the client per intent (a UUIDv7 serves ' +
      'well). The same key with ' +
      'the same body (operation, input, providers; key order ignored) returns the same job; with another body, 409. ' +
      'Key policy: a key is bound to its intent for as long as the job exists. It never expires (no TTL), so a retry ' +
      'days later still finds the job and never creates a second one; a key cannot be reused for another intent. ' +
      'Terminal jobs are purged after JOB_RETENTION_DAYS (default 30); after that the key creates a new job.',
    // Swagger UI's "Try it out" fills the example in: change it for each new intent.
    schema: {
      type: 'string',
      minLength: 1,
      maxLength: MAX_IDEMPOTENCY_KEY_LENGTH,
      pattern: '^[\\x21-\\x7e]+$',
      example: 'summary-report-2026-12-01',
    },
  })
  @preferHeader
  @ApiEndpoint({
    operationId: 'createJob',
    summary: 'Create a job, idempotently',
    description:
      'A new key answers 201 with Location. A repeated key with the same fingerprint answers 200 ' +
      'with `Idempotent-Replayed: true` and the current state of the job. No provider is called in ' +
      'the request: workers run the job.',
    problems: [
      { status: 400, codes: ['idempotency_key_missing', 'idempotency_key_invalid', 'validation_failed'] },
      { status: 409, codes: ['idempotency_key_reused'] },
      { status: 422, codes: ['unknown_operation', 'unknown_provider', 'validation_failed'] },
      { status: 429, codes: ['budget_exceeded'] },
      { status: 503, codes: ['service_unavailable'] },
    ],
  })
  @ApiCreatedResponse({ type: JobView, description: 'Created. `Location: /v1/jobs/{id}`.', headers: jobHeaders })
  @ApiOkResponse({
    type: JobView,
    description: 'Replayed: same key and fingerprint. Header `Idempotent-Replayed: true`.',
    headers: { ...jobHeaders, 'Idempotent-Replayed': headerRef('IdempotentReplayed') },
  })
  async createJob(
    @OwnerId() ownerId: string,
    @IdempotencyKey() idempotencyKey: string,
    @PreferWait() wait: number,
    @Body() body: CreateJobDto,
    @Res() reply: FastifyReply,
  ): Promise<void> {
    const signal = wait ? clientGoneSignal(reply) : undefined;
    sendJob(reply, 201, await this.jobs.create(ownerId, idempotencyKey, body, wait, signal), { waited: wait });
  }

  @Get(':id')
  @RequireScopes('jobs:read')
  @preferHeader
  @jobId
  @ApiEndpoint({
    operationId: 'getJob',
    summary: 'A job with its attempts',
    problems: [
      { status: 400, codes: ['validation_failed'] },
      { status: 404, codes: ['not_found'] },
    ],
  })
  @ApiOkResponse({ type: JobView, headers: { 'Preference-Applied': headerRef('PreferenceApplied') } })
  async getJob(
    @OwnerId() ownerId: string,
    @Param('id', UuidPipe) id: string,
    @PreferWait() wait: number,
    @Res({ passthrough: true }) reply: FastifyReply,
  ): Promise<JobView> {
    const job = await this.jobs.findOwned(ownerId, id, wait, wait ? clientGoneSignal(reply) : undefined);
    if (wait) void reply.header('Preference-Applied', `wait=${wait}`);
    return toJobView(job);
  }

  @Get()
  @RequireScopes('jobs:read')
  @ApiEndpoint({
    operationId: 'listJobs',
    summary: "The owner's jobs, newest first (keyset pagination)",
    problems: [{ status: 400, codes: ['validation_failed'] }],
  })
  @ApiOkResponse({ type: JobPageView })
  async listJobs(@OwnerId() ownerId: string, @Query() query: ListJobsQueryDto): Promise<JobPageView> {
    const page = await this.jobs.list(ownerId, query);
    return { items: page.items.map(toJobSummaryView), nextCursor: page.nextCursor };
  }

  @Post(':id/cancel')
  @HttpCode(200)
  @RequireScopes('jobs:write')
  @jobId
  @ApiEndpoint({
    operationId: 'cancelJob',
    summary: 'Give up the intent: the job is cancelled and every in-flight result is discarded',
    problems: [
      { status: 400, codes: ['validation_failed'] },
      { status: 404, codes: ['not_found'] },
      { status: 409, codes: ['job_terminal'] },
    ],
  })
  @ApiOkResponse({ type: JobView })
  async cancelJob(@OwnerId() ownerId: string, @Param('id', UuidPipe) id: string): Promise<JobView> {
    return toJobView(await this.jobs.cancel(ownerId, id));
  }
}
