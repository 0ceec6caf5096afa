import { Injectable } from '@nestjs/common';
import { DataSource } from 'typeorm';
import { rowsOf } from '../database/transactions.js';
import type { WebhookEventType } from '../ledger/outbox.port.js';
import { endpointFromRow, type WebhookEndpoint, type WebhookEndpointRow } from './webhook.types.js';

const COLUMNS = 'id, owner_id, url, events, status, disabled_reason, disabled_at, created_at';

/** Webhook endpoints. Every method takes the owner (I7): another owner's endpoint does not exist. */
@Injectable()
export class WebhookEndpointsRepository {
  constructor(private readonly dataSource: DataSource) {}

  async insert(ownerId: string, url: string, events: WebhookEventType[], secret: string): Promise<WebhookEndpoint> {
    const rows = await rowsOf<WebhookEndpointRow>(
      this.dataSource.manager,
      `INSERT INTO webhook_endpoints (owner_id, url, events, secret) VALUES ($1, $2, $3, $4) RETURNING ${COLUMNS}`,
      [ownerId, url, events, secret],
    );
    return endpointFromRow(rows[0]);
  }

  async listOwned(ownerId: string): Promise<WebhookEndpoint[]> {
    const rows = await rowsOf<WebhookEndpointRow>(
      this.dataSource.manager,
      `SELECT ${COLUMNS} FROM webhook_endpoints WHERE owner_id = $1 ORDER BY created_at, id`,
      [ownerId],
    );
    return rows.map(endpointFromRow);
  }

  async findOwned(ownerId: string, id: string): Promise<WebhookEndpoint | undefined> {
    const rows = await rowsOf<WebhookEndpointRow>(
      this.dataSource.manager,
      `SELECT ${COLUMNS} FROM webhook_endpoints WHERE owner_id = $1 AND id = $2`,
      [ownerId, id],
    );
    return rows[0] && endpointFromRow(rows[0]);
  }

  /** Deletes the endpoint and, by cascade, its deliveries: nothing more is sent to it. */
  async deleteOwned(ownerId: string, id: string): Promise<boolean> {
    const rows = await rowsOf<{ id: string }>(
      this.dataSource.manager,
      `DELETE FROM webhook_endpoints WHERE owner_id = $1 AND id = $2 RETURNING id`,
      [ownerId, id],
    );
    return rows.length > 0;
  }

  /** The old secret keeps signing beside the new one for `overlapMs`, so receivers can roll over without a gap. */
  async rotateSecret(
    ownerId: string,
    id: string,
    secret: string,
    overlapMs: number,
  ): Promise<{ endpoint: WebhookEndpoint; previousSecretExpiresAt: Date } | undefined> {
    const rows = await rowsOf<WebhookEndpointRow & { previous_secret_expires_at: Date }>(
      this.dataSource.manager,
      `UPDATE webhook_endpoints SET previous_secret = secret, previous_secret_expires_at = now() + $4 * interval '1 millisecond',
              secret = $3, updated_at = now()
        WHERE owner_id = $1 AND id = $2
        RETURNING ${COLUMNS}, previous_secret_expires_at`,
      [ownerId, id, secret, overlapMs],
    );
    return rows[0] && { endpoint: endpointFromRow(rows[0]), previousSecretExpiresAt: rows[0].previous_secret_expires_at };
  }

  /** Re-enables a disabled endpoint with a clean failure record. */
  async enableOwned(ownerId: string, id: string): Promise<WebhookEndpoint | undefined> {
    const rows = await rowsOf<WebhookEndpointRow>(
      this.dataSource.manager,
      `UPDATE webhook_endpoints SET status = 'enabled', disabled_reason = NULL, disabled_at = NULL, failing_since = NULL,
              failed_events = 0, updated_at = now()
        WHERE owner_id = $1 AND id = $2
        RETURNING ${COLUMNS}`,
      [ownerId, id],
    );
    return rows[0] && endpointFromRow(rows[0]);
  }
}
