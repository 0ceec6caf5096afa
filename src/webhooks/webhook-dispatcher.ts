import type { LookupFunction } from 'node:net';

import {
  type BeforeApplicationShutdown,
  Inject,
  Injectable,
  Logger,
  type OnApplicationBootstrap,
} from '@nestjs/common';
import { Counter } from 'prom-client';
import { Webhook } from 'standardwebhooks';

import { deadline, shutdownController } from '../common/deadline.js';
import { ValidationFailedError } from '../common/domain.errors.js';
import { HostLookupError } from '../common/host-lookup.js';
import { Wakeup } from '../common/wakeup.js';
import { type AppConfig, appConfig } from '../config/app.config.js';
import { DatabaseOutage } from '../database/outage.js';
import { MetricsService } from '../metrics/metrics.service.js';
import type { ClaimedDelivery } from './webhook.types.js';
import { DISABLE_AFTER_FAILED_EVENTS, DISABLE_AFTER_FAILING_MS, retryDelayMs } from './webhook-backoff.js';
import { type DeliveryResult, WebhookDeliveriesRepository } from './webhook-deliveries.repository.js';
import { postOnce, WebhookHostLookup } from './webhook-http.js';
import { WebhookOutbox } from './webhook-outbox.js';
import { assertPublicAddress, checkWebhookUrlForm, RefusedAddressError } from './webhook-url.js';

/** Time a call cut off by shutdown may still take; then it is aborted and released to the next dispatcher. */
const SHUTDOWN_GRACE_CAP_MS = 5_000;

/**
 * Sends the outbox (worker role, and `all`): claims due deliveries with FOR UPDATE SKIP LOCKED and a lease,
 * signs each per Standard Webhooks with the `standardwebhooks` reference implementation (the `webhook-id` is
 * the delivery's id, the same on every retry), POSTs it with a deadline and without following redirects, to an
 * address checked when the socket connects, and records the attempt. A 2xx is success; anything else backs off
 * (docs/operations.md#webhooks). Woken in-process after a commit that announced something; polls WEBHOOK_POLL_MS
 * for the rest (other replicas, retries).
 */
@Injectable()
export class WebhookDispatcher implements OnApplicationBootstrap, BeforeApplicationShutdown {
  private readonly logger = new Logger(WebhookDispatcher.name);
  private readonly outage = new DatabaseOutage(this.logger, 'the webhook dispatcher');
  private readonly inFlight = new Set<Promise<void>>();
  private readonly shutdown = shutdownController();
  private stopping = false;
  private loop?: Promise<void>;
  private readonly wakeup = new Wakeup();
  private unsubscribe?: () => void;
  private readonly attemptsMetric: Counter<'outcome'>;
  private readonly disabledMetric: Counter;
  private readonly lookupPublic: LookupFunction;
  private readonly lookupAllowed: LookupFunction;

  constructor(
    @Inject(appConfig.KEY) private readonly config: AppConfig,
    private readonly deliveries: WebhookDeliveriesRepository,
    private readonly outbox: WebhookOutbox,
    hostLookup: WebhookHostLookup,
    metrics: MetricsService,
  ) {
    this.lookupPublic = hostLookup.lookupFunction((address) => assertPublicAddress(address.address));
    this.lookupAllowed = hostLookup.lookupFunction();
    this.attemptsMetric = new Counter({
      name: 'onejob_webhook_attempts_total',
      help:
        'Webhook delivery attempts by outcome: delivered (2xx), ' +
        'failed (other status, timeout, connection error), refused (address check).',
      labelNames: ['outcome'],
      registers: [metrics.registry],
    });
    this.disabledMetric = new Counter({
      name: 'onejob_webhook_endpoints_disabled_total',
      help: 'Webhook endpoints disabled for failing.',
      registers: [metrics.registry],
    });
  }

  onApplicationBootstrap(): void {
    if (this.config.role === 'api') return;
    this.unsubscribe = this.outbox.onAnnounced(() => this.poke());
    this.loop = this.run();
  }

  async beforeApplicationShutdown(): Promise<void> {
    this.stopping = true;
    this.unsubscribe?.();
    this.poke();
    await this.loop;
    if (!this.inFlight.size) return;
    const graceMs = Math.min(this.config.shutdownGraceMs, SHUTDOWN_GRACE_CAP_MS);
    let timer: NodeJS.Timeout | undefined;
    const grace = new Promise<'timeout'>((resolve) => (timer = setTimeout(() => resolve('timeout'), graceMs)));
    const ended = await Promise.race([Promise.all(this.inFlight).then(() => 'done' as const), grace]);
    clearTimeout(timer); // an early end must not leave the timer holding the process
    if (ended === 'timeout') this.shutdown.abort();
    await Promise.allSettled(this.inFlight);
  }

  /**
   * The lease: a claimed delivery is due again after this unless its attempt is recorded first. A call ends by
   * its timeout; the rest covers recording it. A lease that runs out early costs a duplicate (receivers dedupe on
   * webhook-id), never a lost event.
   */
  private get leaseMs(): number {
    return 2 * this.config.webhookTimeoutMs + 1_000;
  }

  private async run(): Promise<void> {
    while (!this.stopping) {
      const room = this.config.webhookConcurrency - this.inFlight.size;
      if (room <= 0) {
        await this.idle(this.config.webhookPollMs);
        continue;
      }
      let claimed: ClaimedDelivery[];
      try {
        claimed = await this.deliveries.claimDue(room, this.leaseMs);
      } catch (error) {
        if (this.outage.failed(error)) {
          await this.idle(this.outage.backoffMs());
        } else {
          this.logger.error({ msg: 'webhook claim failed', error: (error as Error).message });
          await this.idle(this.config.webhookPollMs * 5);
        }
        continue;
      }
      this.outage.recovered();
      for (const delivery of claimed) {
        const sent: Promise<void> = this.send(delivery)
          .catch((error: Error) =>
            this.logger.error({
              msg: 'webhook attempt not recorded; the lease will retry it',
              deliveryId: delivery.id,
              error: error.message,
            }),
          )
          .finally(() => {
            this.inFlight.delete(sent);
            this.poke();
          });
        this.inFlight.add(sent);
      }
      if (claimed.length < room) await this.idle(this.config.webhookPollMs);
    }
  }

  /** One signed POST and its record. */
  async send(delivery: ClaimedDelivery): Promise<void> {
    const timestamp = new Date();
    // During secret rotations every live secret signs: receivers on any of them verify (space-separated signatures).
    const signature = delivery.secrets
      .map((secret) => new Webhook(secret).sign(delivery.id, timestamp, delivery.payload))
      .join(' ');
    const started = performance.now();
    const result: DeliveryResult = {
      id: delivery.id,
      number: delivery.attempts,
      statusCode: null,
      latencyMs: 0,
      error: null,
    };
    // Our own timer, not AbortSignal.any([AbortSignal.timeout(), ...]): a composed signal can be collected by a GC
    // mid-call and never fire (nodejs/node#57736), leaving the slot held until undici's 300 s headers timeout.
    // It bounds the whole exchange: the name's resolution, the connect and the answer's headers.
    const timeout = deadline(this.config.webhookTimeoutMs, this.shutdown.signal);
    try {
      // The form (and an IP literal's address) again: the row may predate a rule, or WEBHOOK_ALLOWED_HOSTS changed.
      const { url, allowed } = checkWebhookUrlForm(delivery.url, this.config.webhookAllowedHosts);
      result.statusCode = await postOnce(url, delivery.payload, {
        headers: {
          'content-type': 'application/json',
          'user-agent': 'onejob-webhooks/1',
          'webhook-id': delivery.id,
          'webhook-timestamp': String(Math.floor(timestamp.getTime() / 1000)),
          'webhook-signature': signature,
        },
        signal: timeout.signal,
        // The address is checked when the socket connects, on every delivery: what was public at creation may
        // resolve to loopback now (DNS rebinding), and what is checked is what is connected to.
        lookup: allowed ? this.lookupAllowed : this.lookupPublic,
      });
      if (result.statusCode < 200 || result.statusCode > 299) {
        // A redirect could point anywhere, including where the creation check refused: it counts as a failure.
        const redirect = result.statusCode >= 300 && result.statusCode < 400;
        result.error = redirect ? `redirect ${result.statusCode} not followed` : `HTTP ${result.statusCode}`;
      }
    } catch (error) {
      const e = error as Error & { code?: string };
      if (error instanceof ValidationFailedError) {
        result.error = `refused: ${error.errors[0]?.message ?? error.message}`;
      } else if (error instanceof RefusedAddressError) result.error = `refused: ${error.message}`;
      else if (this.shutdown.signal.aborted) result.error = 'cut off by shutdown';
      else if (timeout.signal.aborted) result.error = `timed out after ${this.config.webhookTimeoutMs} ms`;
      else if (error instanceof HostLookupError) result.error = error.message;
      else result.error = e.code ?? e.message;
    } finally {
      timeout.clear();
    }
    result.latencyMs = Math.round(performance.now() - started);
    if (result.error === null) {
      this.attemptsMetric.inc({ outcome: 'delivered' });
      return this.deliveries.recordSuccess(result);
    }
    if (this.shutdown.signal.aborted && result.statusCode === null) return this.deliveries.release(result);
    this.attemptsMetric.inc({ outcome: result.error.startsWith('refused: ') ? 'refused' : 'failed' });
    const disabled = await this.deliveries.recordFailure(result, {
      retryInMs: retryDelayMs(delivery.attempts, this.config.webhookBackoffScale),
      disableAfterFailingMs: DISABLE_AFTER_FAILING_MS,
      disableAfterFailedEvents: DISABLE_AFTER_FAILED_EVENTS,
      reasonFailingFor: `every delivery failed for more than ${DISABLE_AFTER_FAILING_MS / 3_600_000} hours`,
      reasonFailedEvents: `${DISABLE_AFTER_FAILED_EVENTS} events in a row failed every attempt`,
    });
    if (!disabled) return;
    this.disabledMetric.inc();
    this.logger.warn({ msg: 'webhook endpoint disabled', endpointId: delivery.endpointId, reason: disabled });
  }

  private poke(): void {
    this.wakeup.poke();
  }

  private idle(ms: number): Promise<void> {
    return this.wakeup.idle(ms);
  }
}
