import { Injectable } from '@nestjs/common';

import type { Queryable } from '../database/transactions.js';
import type { Announcement, Outbox } from '../ledger/outbox.port.js';
import type { CertificationReport } from '../providers/certification.types.js';
import type { DecertifiedListener } from '../providers/recertifier.js';
import { WebhookDeliveriesRepository } from './webhook-deliveries.repository.js';

/**
 * The ledger's outbox port: deliveries written on the settling transaction, the local dispatcher woken after
 * commit. Also the recertifier's listener: a failing scheduled run announces `provider.decertified`.
 */
@Injectable()
export class WebhookOutbox implements Outbox, DecertifiedListener {
  private readonly listeners = new Set<() => void>();

  constructor(private readonly deliveries: WebhookDeliveriesRepository) {}

  enqueue(announcements: Announcement[], manager: Queryable): Promise<void> {
    return this.deliveries.enqueue(announcements, manager);
  }

  async decertified(report: CertificationReport): Promise<void> {
    if (await this.deliveries.enqueueDecertified(report)) this.announced();
  }

  announced(): void {
    for (const listener of this.listeners) listener();
  }

  /** Returns the unsubscribe. */
  onAnnounced(listener: () => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }
}
