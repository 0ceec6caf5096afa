import { ApiProperty } from '@nestjs/swagger';

import { WEBHOOK_EVENT_TYPES } from '../ledger/outbox.port.js';
import type { WebhookDelivery, WebhookEndpoint } from './webhook.types.js';

export class WebhookEndpointView {
  @ApiProperty({ format: 'uuid' }) id!: string;
  @ApiProperty() url!: string;
  @ApiProperty({ enum: WEBHOOK_EVENT_TYPES, isArray: true }) events!: string[];
  @ApiProperty({ enum: ['enabled', 'disabled'] }) status!: string;
  @ApiProperty({ nullable: true, type: String, description: 'Why the endpoint was disabled (it kept failing).' })
  disabledReason!: string | null;
  @ApiProperty({ format: 'date-time', nullable: true, type: String }) disabledAt!: string | null;
  @ApiProperty({ format: 'date-time' }) createdAt!: string;
}

export class CreatedWebhookEndpointView extends WebhookEndpointView {
  @ApiProperty({
    description: 'The signing secret (`whsec_...`, Standard Webhooks). Shown once: store it now.',
    example: 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw',
  })
  secret!: string;
}

export class RotatedSecretView {
  @ApiProperty({ format: 'uuid' }) id!: string;
  @ApiProperty({ description: 'The new signing secret. Shown once.' }) secret!: string;
  @ApiProperty({ format: 'date-time', description: 'Until then deliveries carry a signature by the old secret too.' })
  previousSecretExpiresAt!: string;
}

export class WebhookEndpointListView {
  @ApiProperty({ type: [WebhookEndpointView] }) items!: WebhookEndpointView[];
}

export class DeliveryAttemptView {
  @ApiProperty() number!: number;
  @ApiProperty({
    nullable: true,
    type: Number,
    description: 'The HTTP status answered; null when no answer came (timeout, connection refused).',
  })
  statusCode!: number | null;
  @ApiProperty() latencyMs!: number;
  @ApiProperty({ nullable: true, type: String }) error!: string | null;
  @ApiProperty({ format: 'date-time' }) at!: string;
}

export class WebhookDeliveryView {
  @ApiProperty({
    format: 'uuid',
    description: 'Also the `webhook-id` header of every attempt: receivers dedupe on it.',
  })
  id!: string;
  @ApiProperty({
    format: 'uuid',
    nullable: true,
    type: String,
    description: 'Null for a batch.completed or provider.decertified delivery.',
  })
  jobId!: string | null;
  @ApiProperty({ format: 'uuid', nullable: true, type: String, description: 'Set for a batch.completed delivery.' })
  batchId!: string | null;
  @ApiProperty({ enum: WEBHOOK_EVENT_TYPES }) eventType!: string;
  @ApiProperty({ enum: ['pending', 'succeeded', 'failed'] }) status!: string;
  @ApiProperty() attempts!: number;
  @ApiProperty({ format: 'date-time', nullable: true, type: String }) nextAttemptAt!: string | null;
  @ApiProperty({ nullable: true, type: Number }) lastStatusCode!: number | null;
  @ApiProperty({ nullable: true, type: String }) lastError!: string | null;
  @ApiProperty({ format: 'date-time' }) createdAt!: string;
  @ApiProperty({ format: 'date-time', nullable: true, type: String }) deliveredAt!: string | null;
  @ApiProperty({ type: [DeliveryAttemptView] }) history!: DeliveryAttemptView[];
}

export class WebhookDeliveryPageView {
  @ApiProperty({ type: [WebhookDeliveryView] }) items!: WebhookDeliveryView[];
}

const iso = (date: Date | null) => (date ? date.toISOString() : null);

export function toEndpointView(endpoint: WebhookEndpoint): WebhookEndpointView {
  return {
    id: endpoint.id,
    url: endpoint.url,
    events: endpoint.events,
    status: endpoint.status,
    disabledReason: endpoint.disabledReason,
    disabledAt: iso(endpoint.disabledAt),
    createdAt: endpoint.createdAt.toISOString(),
  };
}

export function toDeliveryView(delivery: WebhookDelivery): WebhookDeliveryView {
  return {
    id: delivery.id,
    jobId: delivery.jobId,
    batchId: delivery.batchId,
    eventType: delivery.eventType,
    status: delivery.status,
    attempts: delivery.attempts,
    nextAttemptAt: iso(delivery.nextAttemptAt),
    lastStatusCode: delivery.lastStatusCode,
    lastError: delivery.lastError,
    createdAt: delivery.createdAt.toISOString(),
    deliveredAt: iso(delivery.deliveredAt),
    history: delivery.history.map((h) => ({ ...h, at: new Date(h.at).toISOString() })),
  };
}
