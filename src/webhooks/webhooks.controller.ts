import { Body, Controller, Delete, Get, HttpCode, Param, Post, Query } from '@nestjs/common';
import { ApiAcceptedResponse, ApiCreatedResponse, ApiNoContentResponse, ApiOkResponse, ApiTags } from '@nestjs/swagger';

import { OwnerId, RequireScopes } from '../auth/auth.decorators.js';
import { ApiEndpoint } from '../common/api-docs.js';
import { UuidPipe } from '../common/uuid.pipe.js';
import {
  CreatedWebhookEndpointView,
  RotatedSecretView,
  toDeliveryView,
  toEndpointView,
  WebhookDeliveryPageView,
  WebhookDeliveryView,
  WebhookEndpointListView,
  WebhookEndpointView,
} from './webhook.view.js';
import { CreateWebhookDto, ListDeliveriesQueryDto } from './webhooks.dto.js';
import { WebhooksService } from './webhooks.service.js';

const notFound = { status: 404, codes: ['not_found'] };
const badId = { status: 400, codes: ['validation_failed'] };

@ApiTags('webhooks')
@Controller({ path: 'webhooks', version: '1' })
export class WebhooksController {
  constructor(private readonly webhooks: WebhooksService) {}

  @Post()
  @RequireScopes('jobs:write')
  @ApiEndpoint({
    operationId: 'createWebhook',
    summary: 'Subscribe an endpoint to job events (the signing secret is shown once)',
    description:
      'Deliveries follow Standard Webhooks: headers `webhook-id` (the same on every retry), `webhook-timestamp`, ' +
      '`webhook-signature` (HMAC-SHA256 with the secret), body `{type, timestamp, data}`. ' +
      'Each settled job is announced once, never for a discarded result.',
    problems: [
      { status: 400, codes: ['validation_failed'] },
      { status: 409, codes: ['webhook_endpoint_limit'] },
      { status: 422, codes: ['validation_failed'] },
    ],
  })
  @ApiCreatedResponse({ type: CreatedWebhookEndpointView })
  async createWebhook(@OwnerId() ownerId: string, @Body() body: CreateWebhookDto): Promise<CreatedWebhookEndpointView> {
    const { endpoint, secret } = await this.webhooks.create(ownerId, body.url, body.events);
    return { ...toEndpointView(endpoint), secret };
  }

  @Get()
  @RequireScopes('jobs:read')
  @ApiEndpoint({
    operationId: 'listWebhooks',
    summary: "The owner's webhook endpoints (without secrets)",
    problems: [],
  })
  @ApiOkResponse({ type: WebhookEndpointListView })
  async listWebhooks(@OwnerId() ownerId: string): Promise<WebhookEndpointListView> {
    return { items: (await this.webhooks.list(ownerId)).map(toEndpointView) };
  }

  @Get(':id')
  @RequireScopes('jobs:read')
  @ApiEndpoint({
    operationId: 'getWebhook',
    summary: "One of the owner's webhook endpoints (without its secret), as the list shows it",
    problems: [badId, notFound],
  })
  @ApiOkResponse({ type: WebhookEndpointView })
  async getWebhook(@OwnerId() ownerId: string, @Param('id', UuidPipe) id: string): Promise<WebhookEndpointView> {
    return toEndpointView(await this.webhooks.get(ownerId, id));
  }

  @Delete(':id')
  @HttpCode(204)
  @RequireScopes('jobs:write')
  @ApiEndpoint({
    operationId: 'deleteWebhook',
    summary: 'Delete an endpoint and its pending deliveries',
    problems: [badId, notFound],
  })
  @ApiNoContentResponse()
  async deleteWebhook(@OwnerId() ownerId: string, @Param('id', UuidPipe) id: string): Promise<void> {
    await this.webhooks.remove(ownerId, id);
  }

  @Post(':id/rotate-secret')
  @HttpCode(200)
  @RequireScopes('jobs:write')
  @ApiEndpoint({
    operationId: 'rotateWebhookSecret',
    summary: 'A new signing secret (shown once); the old one keeps signing beside it for 24 hours',
    description:
      "Secrets rotated out earlier keep signing until their own `previousSecretExpiresAt`, so each rotation's " +
      'promise holds. With 5 rotated-out secrets still signing, another rotation is refused ' +
      '(409 `webhook_rotation_limit`) until the oldest expires.',
    problems: [badId, notFound, { status: 409, codes: ['webhook_rotation_limit'] }],
  })
  @ApiOkResponse({ type: RotatedSecretView })
  async rotateWebhookSecret(@OwnerId() ownerId: string, @Param('id', UuidPipe) id: string): Promise<RotatedSecretView> {
    const rotated = await this.webhooks.rotateSecret(ownerId, id);
    return {
      id: rotated.id,
      secret: rotated.secret,
      previousSecretExpiresAt: rotated.previousSecretExpiresAt.toISOString(),
    };
  }

  @Post(':id/enable')
  @HttpCode(200)
  @RequireScopes('jobs:write')
  @ApiEndpoint({
    operationId: 'enableWebhook',
    summary: 'Re-enable an endpoint that was disabled for failing',
    problems: [badId, notFound],
  })
  @ApiOkResponse({ type: WebhookEndpointView })
  async enableWebhook(@OwnerId() ownerId: string, @Param('id', UuidPipe) id: string): Promise<WebhookEndpointView> {
    return toEndpointView(await this.webhooks.enable(ownerId, id));
  }

  @Get(':id/deliveries')
  @RequireScopes('jobs:read')
  @ApiEndpoint({
    operationId: 'listWebhookDeliveries',
    summary: 'Deliveries to an endpoint, newest first, with every attempt (status code, latency)',
    problems: [badId, notFound],
  })
  @ApiOkResponse({ type: WebhookDeliveryPageView })
  async listWebhookDeliveries(
    @OwnerId() ownerId: string,
    @Param('id', UuidPipe) id: string,
    @Query() query: ListDeliveriesQueryDto,
  ): Promise<WebhookDeliveryPageView> {
    return { items: (await this.webhooks.listDeliveries(ownerId, id, query)).map(toDeliveryView) };
  }

  @Post(':id/deliveries/:deliveryId/retry')
  @HttpCode(202)
  @RequireScopes('jobs:write')
  @ApiEndpoint({
    operationId: 'retryWebhookDelivery',
    summary: 'Send a delivery again now (same webhook-id), whatever its state',
    problems: [badId, notFound, { status: 409, codes: ['webhook_disabled'] }],
  })
  @ApiAcceptedResponse({ type: WebhookDeliveryView })
  async retryWebhookDelivery(
    @OwnerId() ownerId: string,
    @Param('id', UuidPipe) id: string,
    @Param('deliveryId', UuidPipe) deliveryId: string,
  ): Promise<WebhookDeliveryView> {
    return toDeliveryView(await this.webhooks.retry(ownerId, id, deliveryId));
  }
}
