import { Body, Controller, Delete, Get, HttpCode, Put } from '@nestjs/common';
import { ApiNoContentResponse, ApiOkResponse, ApiTags } from '@nestjs/swagger';
import { OwnerId, RequireScopes } from '../auth/auth.decorators.js';
import { ApiEndpoint } from '../common/api-docs.js';
import { BudgetsService, type BudgetStatus } from './budgets.service.js';
import { SetBudgetDto } from './usage.dto.js';
import { BudgetView } from './usage.view.js';

const toBudgetView = (status: BudgetStatus): BudgetView => ({
  monthlyLimit: status.monthlyLimit,
  currency: status.currency,
  spent: status.spent,
  reserved: status.reserved,
  resetsAt: status.resetsAt.toISOString(),
});

@ApiTags('usage')
@Controller({ path: 'budget', version: '1' })
export class BudgetController {
  constructor(private readonly budgets: BudgetsService) {}

  @Get()
  @RequireScopes('jobs:read')
  @ApiEndpoint({ operationId: 'getBudget', summary: "The owner's monthly budget, this month's spend and the reset time", problems: [{ status: 404, codes: ['not_found'] }] })
  @ApiOkResponse({ type: BudgetView })
  async getBudget(@OwnerId() ownerId: string): Promise<BudgetView> {
    return toBudgetView(await this.budgets.status(ownerId));
  }

  @Put()
  @RequireScopes('jobs:write')
  @ApiEndpoint({
    operationId: 'setBudget',
    summary: 'Set the monthly budget: past it, POST /v1/jobs answers 429 budget_exceeded until the month ends',
    description: 'Spend counts attempts priced in the budget currency (catalog `pricing`), discarded results included. Other replicas apply a change within 10 s.',
    problems: [{ status: 400, codes: ['validation_failed'] }],
  })
  @ApiOkResponse({ type: BudgetView })
  async setBudget(@OwnerId() ownerId: string, @Body() body: SetBudgetDto): Promise<BudgetView> {
    return toBudgetView(await this.budgets.set({ ownerId, monthlyLimit: body.monthlyLimit, currency: body.currency }));
  }

  @Delete()
  @HttpCode(204)
  @RequireScopes('jobs:write')
  @ApiEndpoint({ operationId: 'deleteBudget', summary: 'Remove the monthly budget', problems: [{ status: 404, codes: ['not_found'] }] })
  @ApiNoContentResponse()
  async deleteBudget(@OwnerId() ownerId: string): Promise<void> {
    await this.budgets.remove(ownerId);
  }
}
