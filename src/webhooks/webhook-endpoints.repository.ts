import { Injectable } from '@nestjs/common';
import { DataSource } from 'typeorm';

import { type Queryable, rowsOf } from '../database/transactions.js';
import type { WebhookEventType } from '../ledger/outbox.port.js';
import { endpointFromRow, type WebhookEndpoint, type WebhookEndpointRow } from './webhook.types.js';

const COLUMNS = 'id, owner_id, url, events, status, disabled_reason, disabled_at, created_at';

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
    await manager.query(`SELECT pg_advisory_xact_lock(hashtextextended('onejob.webhook_endpoints:' || $1, 0))`, [
      ownerId,
    ]);
    const rows = await rowsOf<WebhookEndpointRow>(
      manager,
      `INSERT INTO webhook_endpoints (owner_id, url, events, secret)
       SELECT $1, $2, $3, $4 WHERE (SELECT count(*) FROM webhook_endpoints WHERE owner_id = $1) < $5
       RETURNING ${COLUMNS}`,
      [ownerId, url, events, secret, limit],
    );
    return rows[0] && endpointFromRow(rows[0]);
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
      `WITH live AS (
         SELECT w.id, COALESCE((SELECT jsonb_agg(p ORDER BY (p->>'expiresAt')::timestamptz)
           FROM jsonb_array_elements(w.previous_secrets) p
                                 WHERE (p->>'expiresAt')::timestamptz > now()), '[]'::jsonb) AS retired
           FROM webhook_endpoints w WHERE w.owner_id = $1 AND w.id = $2
          FOR UPDATE
       ), rotated AS (
         UPDATE webhook_endpoints w
            SET previous_secrets = live.retired || jsonb_build_array(jsonb_build_object(
                  'secret', w.secret, 'expiresAt', now() + $4 * interval '1 millisecond')),
                secret = $3, updated_at = now()
           FROM live WHERE w.id = live.id AND jsonb_array_length(live.retired) < $5
         RETURNING w.id, now() + $4 * interval '1 millisecond' AS expires_at
       )
       -- The endpoint's view columns are not changed by a rotation: the statement's snapshot of them is current.
       SELECT ${COLUMNS.split(', ')
         .map((c) => `w.${c}`)
         .join(', ')}, r.expires_at AS previous_secret_expires_at
         FROM live JOIN webhook_endpoints w ON w.id = live.id LEFT JOIN rotated r ON r.id = live.id`,
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
    const rows = await rowsOf<WebhookEndpointRow>(
      this.dataSource.manager,
      `UPDATE webhook_endpoints SET status = 'enabled', disabled_reason = NULL, disabled_at = NULL,
        failing_since = NULL,
              failed_events = 0, updated_at = now()
        WHERE owner_id = $1 AND id = $2
        RETURNING ${COLUMNS}`,
      [ownerId, id],
    );
    return rows[0] && endpointFromRow(rows[0]);
  }
}
