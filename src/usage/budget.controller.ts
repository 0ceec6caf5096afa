import { Body, Controller, Delete, Get, HttpCode, Param, Put } from '@nestjs/common';
import { ApiNoContentResponse, ApiOkResponse, ApiTags } from '@nestjs/swagger';

import { OwnerId, RequireAnyScope, RequireScopes } from '../auth/auth.decorators.js';
import { ApiEndpoint } from '../common/api-docs.js';
import { BudgetsService, type BudgetStatus } from './budgets.service.js';
import { BudgetOwnerParamsDto, SetBudgetDto } from './usage.dto.js';
import { BudgetView } from './usage.view.js';

const toBudgetView = (status: BudgetStatus): BudgetView => ({
  monthlyLimit: status.monthlyLimit,
  currency: status.currency,
  spent: status.spent,
  reserved: status.reserved,
  resetsAt: status.resetsAt.toISOString(),
});

const SET_DESCRIPTION =
  'Spend counts attempts priced in the budget currency (catalog `pricing`), discarded results included, ' +
  'plus the worst case live jobs still hold. Every replica applies a change as it commits. ' +
  "A budget is an admin's limit: scope `budgets:write`.";

/** An owner reads its budget; admins (`budgets:write`) set and remove any owner's (docs/operations.md#cost). */
@ApiTags('usage')
@Controller({ version: '1' })
export class BudgetController {
  constructor(private readonly budgets: BudgetsService) {}

  @Get('budget')
  @RequireScopes('jobs:read')
  @ApiEndpoint({
    operationId: 'getBudget',
    summary: "The owner's monthly budget, this month's spend and the reset time",
    problems: [{ status: 404, codes: ['not_found'] }],
  })
  @ApiOkResponse({ type: BudgetView })
  async getBudget(@OwnerId() ownerId: string): Promise<BudgetView> {
    return toBudgetView(await this.budgets.status(ownerId));
  }

  @Put('budget')
  @RequireScopes('budgets:write')
  @ApiEndpoint({
    operationId: 'setBudget',
    summary:
      "Set the key's own owner's monthly budget: " +
      'past it, POST /v1/jobs answers 429 budget_exceeded until the month ends',
    description: SET_DESCRIPTION,
    problems: [{ status: 400, codes: ['validation_failed'] }],
  })
  @ApiOkResponse({ type: BudgetView })
  async setBudget(@OwnerId() ownerId: string, @Body() body: SetBudgetDto): Promise<BudgetView> {
    return toBudgetView(await this.budgets.set({ ownerId, monthlyLimit: body.monthlyLimit, currency: body.currency }));
  }

  @Delete('budget')
  @HttpCode(204)
  @RequireScopes('budgets:write')
  @ApiEndpoint({
    operationId: 'deleteBudget',
    summary: "Remove the key's own owner's monthly budget",
    problems: [{ status: 404, codes: ['not_found'] }],
  })
  @ApiNoContentResponse()
  async deleteBudget(@OwnerId() ownerId: string): Promise<void> {
    await this.budgets.remove(ownerId);
  }

  @Get('ops/budgets/:ownerId')
  @RequireAnyScope('budgets:write', 'ops:read')
  @ApiEndpoint({
    operationId: 'getOwnerBudget',
    summary: "Any owner's monthly budget, spend and reset time (admins and operators)",
    problems: [
      { status: 400, codes: ['validation_failed'] },
      { status: 404, codes: ['not_found'] },
    ],
  })
  @ApiOkResponse({ type: BudgetView })
  async getOwnerBudget(@Param() params: BudgetOwnerParamsDto): Promise<BudgetView> {
    return toBudgetView(await this.budgets.status(params.ownerId));
  }

  @Put('ops/budgets/:ownerId')
  @RequireScopes('budgets:write')
  @ApiEndpoint({
    operationId: 'setOwnerBudget',
    summary: "Set any owner's monthly budget (admins): past it, that owner's POST /v1/jobs answers 429 budget_exceeded",
    description: SET_DESCRIPTION,
    problems: [{ status: 400, codes: ['validation_failed'] }],
  })
  @ApiOkResponse({ type: BudgetView })
  async setOwnerBudget(@Param() params: BudgetOwnerParamsDto, @Body() body: SetBudgetDto): Promise<BudgetView> {
    return toBudgetView(
      await this.budgets.set({ ownerId: params.ownerId, monthlyLimit: body.monthlyLimit, currency: body.currency }),
    );
  }

  @Delete('ops/budgets/:ownerId')
  @HttpCode(204)
  @RequireScopes('budgets:write')
  @ApiEndpoint({
    operationId: 'deleteOwnerBudget',
    summary: "Remove any owner's monthly budget (admins)",
    problems: [
      { status: 400, codes: ['validation_failed'] },
      { status: 404, codes: ['not_found'] },
    ],
  })
  @ApiNoContentResponse()
  async deleteOwnerBudget(@Param() params: BudgetOwnerParamsDto): Promise<void> {
    await this.budgets.remove(params.ownerId);
  }
}
