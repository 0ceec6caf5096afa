import { Global, Module } from '@nestjs/common';

import { type AppConfig, appConfig } from '../config/app.config.js';
import { OUTBOX } from '../ledger/outbox.port.js';
import { DECERTIFIED_LISTENER } from '../providers/recertifier.js';
import { WebhookDeliveriesRepository } from './webhook-deliveries.repository.js';
import { WebhookDispatcher } from './webhook-dispatcher.js';
import { WebhookEndpointsRepository } from './webhook-endpoints.repository.js';
import { WebhookHostLookup } from './webhook-http.js';
import { WebhookOutbox } from './webhook-outbox.js';
import { WebhooksController } from './webhooks.controller.js';
import { WebhooksService } from './webhooks.service.js';

/**
 * Global so that the ledger (the bottom of the graph, which imports nothing above it) finds the outbox port, and
 * the recertifier its listener, by their tokens without importing this module.
 */
@Global()
@Module({
  controllers: [WebhooksController],
  providers: [
    WebhookEndpointsRepository,
    WebhookDeliveriesRepository,
    WebhookOutbox,
    { provide: OUTBOX, useExisting: WebhookOutbox },
    { provide: DECERTIFIED_LISTENER, useExisting: WebhookOutbox },
    WebhooksService,
    WebhookDispatcher,
    {
      provide: WebhookHostLookup,
      inject: [appConfig.KEY],
      useFactory: (config: AppConfig) =>
        new WebhookHostLookup({ timeoutMs: config.dnsTimeoutMs, servers: config.dnsServers }),
    },
  ],
  exports: [OUTBOX, DECERTIFIED_LISTENER],
})
export class WebhooksModule {}
