import { randomBytes } from 'node:crypto';

import { Inject, Injectable } from '@nestjs/common';
import { DataSource } from 'typeorm';

import { NotFoundError } from '../common/domain.errors.js';
import { type AppConfig, appConfig } from '../config/app.config.js';
import type { WebhookEventType } from '../ledger/outbox.port.js';
import type { WebhookDelivery, WebhookEndpoint } from './webhook.types.js';
import { type DeliveryPageQuery, WebhookDeliveriesRepository } from './webhook-deliveries.repository.js';
import { WebhookEndpointsRepository } from './webhook-endpoints.repository.js';
import { WebhookHostLookup } from './webhook-http.js';
import { WebhookOutbox } from './webhook-outbox.js';
import { checkWebhookUrl } from './webhook-url.js';
import { WebhookDisabledError, WebhookEndpointLimitError, WebhookRotationLimitError } from './webhooks.errors.js';

/** How long the old secret still signs after a rotation. */
const ROTATION_OVERLAP_MS = 24 * 3_600_000;

/**
 * Rotated-out secrets that may sign at once, beside the current one. Each rotation's promised expiry holds, so a
 * rotation past this is refused (409) rather than dropping a secret early; each one is a signature per delivery.
 */
const MAX_RETIRED_SECRETS = 5;

/** Standard Webhooks secrets: `whsec_` and base64 of 24-64 random bytes. */
function newSecret(): string {
  return `whsec_${randomBytes(32).toString('base64')}`;
}

@Injectable()
export class WebhooksService {
  constructor(
    @Inject(appConfig.KEY) private readonly config: AppConfig,
    private readonly dataSource: DataSource,
    private readonly endpoints: WebhookEndpointsRepository,
    private readonly deliveries: WebhookDeliveriesRepository,
    private readonly outbox: WebhookOutbox,
    private readonly hostLookup: WebhookHostLookup,
  ) {}

  async create(
    ownerId: string,
    url: string,
    events: WebhookEventType[],
  ): Promise<{ endpoint: WebhookEndpoint; secret: string }> {
    // Resolved through HostLookup: bounded by DNS_TIMEOUT_MS and off libuv's pool, so a name whose DNS server
    // never answers is a quick 422 and holds up no one else.
    const resolve = async (host: string) => (await this.hostLookup.resolve(host)).map((a) => a.address);
    const checked = await checkWebhookUrl(url, this.config.webhookAllowedHosts, resolve);
    const secret = newSecret();
    const limit = this.config.webhookMaxEndpointsPerOwner;
    const endpoint = await this.dataSource.transaction((manager) =>
      this.endpoints.insertWithinLimit(manager, ownerId, checked, events, secret, limit),
    );
    if (!endpoint) throw new WebhookEndpointLimitError(limit);
    return { endpoint, secret };
  }

  list(ownerId: string): Promise<WebhookEndpoint[]> {
    return this.endpoints.listOwned(ownerId);
  }

  async get(ownerId: string, id: string): Promise<WebhookEndpoint> {
    const endpoint = await this.endpoints.findOwned(ownerId, id);
    if (!endpoint) throw new NotFoundError('Webhook endpoint');
    return endpoint;
  }

  async remove(ownerId: string, id: string): Promise<void> {
    if (!(await this.endpoints.deleteOwned(ownerId, id))) throw new NotFoundError('Webhook endpoint');
  }

  async rotateSecret(
    ownerId: string,
    id: string,
  ): Promise<{ id: string; secret: string; previousSecretExpiresAt: Date }> {
    const secret = newSecret();
    const rotated = await this.endpoints.rotateSecret(ownerId, id, secret, ROTATION_OVERLAP_MS, MAX_RETIRED_SECRETS);
    if (!rotated) throw new NotFoundError('Webhook endpoint');
    if (!rotated.rotated) throw new WebhookRotationLimitError(MAX_RETIRED_SECRETS);
    return { id, secret, previousSecretExpiresAt: rotated.previousSecretExpiresAt };
  }

  async enable(ownerId: string, id: string): Promise<WebhookEndpoint> {
    const endpoint = await this.endpoints.enableOwned(ownerId, id);
    if (!endpoint) throw new NotFoundError('Webhook endpoint');
    this.outbox.announced();
    return endpoint;
  }

  async listDeliveries(ownerId: string, id: string, query: DeliveryPageQuery): Promise<WebhookDelivery[]> {
    if (!(await this.endpoints.findOwned(ownerId, id))) throw new NotFoundError('Webhook endpoint');
    return this.deliveries.listForEndpoint(ownerId, id, query);
  }

  async retry(ownerId: string, id: string, deliveryId: string): Promise<WebhookDelivery> {
    const endpoint = await this.endpoints.findOwned(ownerId, id);
    if (!endpoint) throw new NotFoundError('Webhook endpoint');
    if (endpoint.status === 'disabled') throw new WebhookDisabledError(endpoint.disabledReason);
    const delivery = await this.deliveries.retryNow(ownerId, id, deliveryId);
    if (!delivery) throw new NotFoundError('Delivery');
    this.outbox.announced();
    return delivery;
  }
}
