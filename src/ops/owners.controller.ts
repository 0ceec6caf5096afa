import { Body, Controller, Get, Param, Put, Query } from '@nestjs/common';
import { ApiOkResponse, ApiTags } from '@nestjs/swagger';

import { CurrentPrincipal, RequireAnyScope, RequireScopes } from '../auth/auth.decorators.js';
import type { Principal } from '../auth/scopes.js';
import { ApiEndpoint } from '../common/api-docs.js';
import { ListOwnersQueryDto, OwnerParamsDto, SetOwnerShareDto } from './owners.dto.js';
import { OwnersService } from './owners.service.js';
import { OwnerSharePageView, OwnerShareView } from './owners.view.js';

const badInput = { status: 400, codes: ['validation_failed'] };

/** Fair share between owners (docs/design.md#fair-share): weights and caps are an admin's (`owners:write`). */
@ApiTags('operations')
@Controller({ version: '1' })
export class OwnersController {
  constructor(private readonly owners: OwnersService) {}

  @Put('ops/owners/:owner')
  @RequireScopes('owners:write')
  @ApiEndpoint({
    operationId: 'setOwnerShare',
    summary:
      "Set an owner's weight and maxConcurrency (admins): its share of contended slots, and its cap on calls in flight",
    description:
      'Every replica claims with it from its commit (the claim statement reads it). Recorded with the acting key ' +
      'in owner_share_changes. Setting weight 1 and no cap restores the default.',
    problems: [badInput],
  })
  @ApiOkResponse({ type: OwnerShareView })
  setOwnerShare(
    @CurrentPrincipal() principal: Principal,
    @Param() params: OwnerParamsDto,
    @Body() body: SetOwnerShareDto,
  ): Promise<OwnerShareView> {
    return this.owners.set(principal, params.owner, body.weight, body.maxConcurrency ?? null);
  }

  @Get('ops/owners')
  @RequireAnyScope('ops:read', 'owners:write')
  @ApiEndpoint({
    operationId: 'listOwnerShares',
    summary:
      'Owners with live jobs or settings, the most queued first: jobs queued, in flight and unknown, weight, cap',
    problems: [badInput],
  })
  @ApiOkResponse({ type: OwnerSharePageView })
  listOwnerShares(@Query() query: ListOwnersQueryDto): Promise<OwnerSharePageView> {
    return this.owners.list(query.limit);
  }
}
