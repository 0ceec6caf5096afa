import { Body, Controller, HttpCode, Param, Post } from '@nestjs/common';
import {
  ApiCreatedResponse,
  ApiOkResponse,
  ApiParam,
  ApiProperty,
  ApiPropertyOptional,
  ApiTags,
} from '@nestjs/swagger';
import { IsIn, IsOptional, IsString, Length } from 'class-validator';

import { CurrentPrincipal, OwnerId, RequireScopes } from '../auth/auth.decorators.js';
import type { Principal } from '../auth/scopes.js';
import { ApiEndpoint } from '../common/api-docs.js';
import { UuidPipe } from '../common/uuid.pipe.js';
import { JobView, toJobView } from '../jobs/job.view.js';
import { AttemptsService } from './attempts.service.js';
import { ResolvedAttemptView, toResolvedAttemptView } from './attempts.view.js';

export class RequestAttemptDto {
  @ApiPropertyOptional({
    description: "A provider of the job's chain; default: the one the job would use next.",
    minLength: 1,
    maxLength: 100,
  })
  @IsOptional()
  @IsString()
  @Length(1, 100)
  provider?: string;
}

export class ResolveAttemptDto {
  @ApiProperty({
    enum: ['failed', 'cancelled'],
    description: 'failed: it did not happen; cancelled: stop waiting (a result that still arrives may win).',
  })
  @IsIn(['failed', 'cancelled'])
  status!: 'failed' | 'cancelled';

  @ApiProperty({
    description: 'Why: recorded on the attempt and in the audit trail.',
    example: 'provider support confirmed the request was dropped',
    minLength: 1,
    maxLength: 500,
  })
  @IsString()
  @Length(1, 500)
  reason!: string;
}

@ApiTags('attempts')
@Controller({ version: '1' })
export class AttemptsController {
  constructor(private readonly attempts: AttemptsService) {}

  @Post('jobs/:id/attempts')
  @RequireScopes('jobs:write')
  @ApiParam({ name: 'id', description: 'A job id.', schema: { type: 'string', format: 'uuid' } })
  @ApiEndpoint({
    operationId: 'requestAttempt',
    summary: 'Ask for another attempt now',
    description:
      'Queues an attempt for a worker. Refused while an attempt is starting, running or unknown ' +
      '(I3), once the job is terminal, ' +
      'for a named provider that is neither the primary nor certified now (I6), and for a provider ' +
      'paused by its own rate limit ' +
      '(`provider_paused`, with `Retry-After`: ask again then, or name another provider of the chain).',
    problems: [
      { status: 400, codes: ['validation_failed'] },
      { status: 404, codes: ['not_found'] },
      {
        status: 409,
        codes: ['attempt_in_progress', 'job_terminal', 'provider_not_certified', 'provider_paused'],
        retryAfterWhenPaused: true,
      },
      { status: 422, codes: ['unknown_provider'] },
    ],
  })
  @ApiCreatedResponse({ type: JobView, description: 'The job with the queued attempt (status starting).' })
  async requestAttempt(
    @OwnerId() ownerId: string,
    @Param('id', UuidPipe) id: string,
    @Body() body: RequestAttemptDto,
  ): Promise<JobView> {
    return toJobView(await this.attempts.request(ownerId, id, body.provider));
  }

  @Post('attempts/:id/resolve')
  @HttpCode(200)
  @RequireScopes('attempts:resolve')
  @ApiParam({ name: 'id', description: 'An attempt id.', schema: { type: 'string', format: 'uuid' } })
  @ApiEndpoint({
    operationId: 'resolveAttempt',
    summary: 'Resolve an unknown attempt out of band (operators, any owner)',
    description:
      "`attempts:resolve` is an operator scope: it resolves any owner's unknown attempt, and the " +
      "job's events record the acting key. " +
      'failed: the work did not happen; cancelled: stop waiting (a result that still arrives may ' +
      'win). Either frees the slot. ' +
      "The answer is the attempt and the job's state, never the job's input, key or result (those " +
      'need `jobs:read` or `ops:read`).',
    problems: [
      { status: 400, codes: ['validation_failed'] },
      { status: 404, codes: ['not_found'] },
      { status: 409, codes: ['attempt_not_unknown'] },
    ],
  })
  @ApiOkResponse({ type: ResolvedAttemptView })
  async resolveAttempt(
    @CurrentPrincipal() actor: Principal,
    @Param('id', UuidPipe) id: string,
    @Body() body: ResolveAttemptDto,
  ): Promise<ResolvedAttemptView> {
    return toResolvedAttemptView(await this.attempts.resolve(actor, id, body.status, body.reason), id);
  }
}
