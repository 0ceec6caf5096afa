import { Controller, Get, Query } from '@nestjs/common';
import { ApiOkResponse, ApiTags } from '@nestjs/swagger';

import { OwnerId, RequireScopes } from '../auth/auth.decorators.js';
import { ApiEndpoint } from '../common/api-docs.js';
import { UsageQueryDto } from './usage.dto.js';
import { UsageService } from './usage.service.js';
import { UsageView } from './usage.view.js';

@ApiTags('usage')
@Controller({ path: 'usage', version: '1' })
export class UsageController {
  constructor(private readonly usage: UsageService) {}

  @Get()
  @RequireScopes('jobs:read')
  @ApiEndpoint({
    operationId: 'getUsage',
    summary: "The owner's spend: attempts, tokens and cost (with the discarded share) by operation, provider or day",
    description:
      'Attempts started in [from, to), priced from their usage at the price of the time; ' +
      'one group per key and currency. Purged jobs (JOB_RETENTION_DAYS) no longer count.',
    problems: [{ status: 400, codes: ['validation_failed'] }],
  })
  @ApiOkResponse({ type: UsageView })
  getUsage(@OwnerId() ownerId: string, @Query() query: UsageQueryDto): Promise<UsageView> {
    return this.usage.spend(ownerId, query.from, query.to, query.groupBy);
  }
}
