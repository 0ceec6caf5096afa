import { Injectable } from '@nestjs/common';
import { DataSource } from 'typeorm';

import { type Queryable, rowsOf } from '../database/transactions.js';
import type { WebhookEventType } from '../ledger/outbox.port.js';
import { endpointFromRow, type WebhookEndpoint, type WebhookEndpointRow } from './webhook.types.js';
import {
  DELETE_OWNED,
  ENABLE_OWNED,
  FIND_OWNED,
  INSERT_WITHIN_LIMIT,
  LIST_OWNED,
  LOCK_OWNER_ENDPOINTS,
  ROTATE_SECRET,
} from './webhook-endpoints.sql.js';

/** Webhook endpoints. Every method takes the owner (I7): another owner's endpoint does not exist. */
@Injectable()
export class WebhookEndpointsRepository {
  constructor(private readonly dataSource: DataSource) {}

  /**
   * Inserts an endpoint unless the owner already has `limit`; undefined then. Run it in a transaction: the
   * owner's advisory lock (held to commit) serialises concurrent registrations of one owner, and the count runs
   * in a statement of its own after the lock is granted, so its snapshot sees every endpoint committed before.
   * (In one statement the snapshot would predate the lock, and two registrations could both count limit - 1.)
   */
  async insertWithinLimit(
    manager: Queryable,
    ownerId: string,
    url: string,
    events: WebhookEventType[],
    secret: string,
    limit: number,
  ): Promise<WebhookEndpoint | undefined> {
    await manager.query(LOCK_OWNER_ENDPOINTS.text, [ownerId]);
    const rows = await rowsOf<WebhookEndpointRow>(manager, INSERT_WITHIN_LIMIT, [ownerId, url, events, secret, limit]);
    return rows[0] && endpointFromRow(rows[0]);
  }

  async listOwned(ownerId: string): Promise<WebhookEndpoint[]> {
    const rows = await rowsOf<WebhookEndpointRow>(this.dataSource.manager, LIST_OWNED, [ownerId]);
    return rows.map(endpointFromRow);
  }

  async findOwned(ownerId: string, id: string): Promise<WebhookEndpoint | undefined> {
    const rows = await rowsOf<WebhookEndpointRow>(this.dataSource.manager, FIND_OWNED, [ownerId, id]);
    return rows[0] && endpointFromRow(rows[0]);
  }

  /** Deletes the endpoint and, by cascade, its deliveries: nothing more is sent to it. */
  async deleteOwned(ownerId: string, id: string): Promise<boolean> {
    const rows = await rowsOf<{ id: string }>(this.dataSource.manager, DELETE_OWNED, [ownerId, id]);
    return rows.length > 0;
  }

  /**
   * The current secret retires and keeps signing beside the new one for `overlapMs`; secrets retired earlier
   * keep their own expiry (each rotation's `previousSecretExpiresAt` holds), expired ones are dropped. Undefined
   * when there is no such endpoint, or `rotated: false` when `maxRetired` retired secrets still sign: one more
   * would break no promise, but each is a signature on every delivery.
   */
  async rotateSecret(
    ownerId: string,
    id: string,
    secret: string,
    overlapMs: number,
    maxRetired: number,
  ): Promise<
    { rotated: true; endpoint: WebhookEndpoint; previousSecretExpiresAt: Date } | { rotated: false } | undefined
  > {
    const rows = await rowsOf<WebhookEndpointRow & { previous_secret_expires_at: Date | null }>(
      this.dataSource.manager,
      ROTATE_SECRET,
      [ownerId, id, secret, overlapMs, maxRetired],
    );
    if (!rows[0]) return undefined;
    if (rows[0].previous_secret_expires_at === null) return { rotated: false };
    return {
      rotated: true,
      endpoint: endpointFromRow(rows[0]),
      previousSecretExpiresAt: rows[0].previous_secret_expires_at,
    };
  }

  /** Re-enables a disabled endpoint with a clean failure record. */
  async enableOwned(ownerId: string, id: string): Promise<WebhookEndpoint | undefined> {
    const rows = await rowsOf<WebhookEndpointRow>(this.dataSource.manager, ENABLE_OWNED, [ownerId, id]);
    return rows[0] && endpointFromRow(rows[0]);
  }
}
