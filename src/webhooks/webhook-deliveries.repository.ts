import { Injectable } from '@nestjs/common';
import { DataSource } from 'typeorm';

import { type Queryable, rowsOf } from '../database/transactions.js';
import { announcementBody, announcementSql, isoTimeSql } from '../ledger/announcement.js';
import type { Announcement } from '../ledger/outbox.port.js';
import type { CertificationReport } from '../providers/certification.types.js';
import {
  type ClaimedDelivery,
  deliveryFromRow,
  type DeliveryStatus,
  type WebhookDelivery,
  type WebhookDeliveryRow,
} from './webhook.types.js';

interface ClaimedRow {
  id: string;
  endpoint_id: string;
  attempts: number;
  payload: string;
  url: string;
  secret: string;
  /** The retired secrets whose promised expiry has not passed, oldest first. */
  previous_secrets: string[] | null;
}

export interface DeliveryResult {
  id: string;
  /**
   * The claim's attempt number: a result for an older claim (the delivery was retried by hand meanwhile) still
   * records its attempt.
   */
  number: number;
  statusCode: number | null;
  latencyMs: number;
  error: string | null;
}

export interface FailurePolicy {
  /** Null: the attempts are exhausted, the delivery fails. */
  retryInMs: number | null;
  disableAfterFailingMs: number;
  disableAfterFailedEvents: number;
  reasonFailingFor: string;
  reasonFailedEvents: string;
}

export interface DeliveryPageQuery {
  limit: number;
  jobId?: string;
  status?: DeliveryStatus;
}

const HISTORY = `(SELECT json_agg(json_build_object('number', a.number, 'statusCode', a.status_code, 'latencyMs',
  a.latency_ms,
  'error', a.error, 'at', a.at) ORDER BY a.id) FROM webhook_delivery_attempts a WHERE a.delivery_id = d.id) AS history`;
const COLUMNS = `d.id, d.endpoint_id, d.job_id, d.batch_id, d.event_type, d.status, d.attempts, d.next_attempt_at,
  d.last_status_code,
  d.last_error, d.created_at, d.delivered_at, ${HISTORY}`;

/** The transactional outbox and its delivery log (docs/operations.md#webhooks). */
@Injectable()
export class WebhookDeliveriesRepository {
  constructor(private readonly dataSource: DataSource) {}

  /**
   * One statement on the settling transaction: a delivery per announcement and subscribed, enabled endpoint of
   * the job's owner, its payload a snapshot of the job as this transaction leaves it. An owner without
   * endpoints costs one index probe that finds nothing.
   */
  async enqueue(announcements: Announcement[], manager: Queryable): Promise<void> {
    await manager.query(
      `INSERT INTO webhook_deliveries (endpoint_id, owner_id, job_id, event_type, payload)
       SELECT w.id, j.owner_id, j.id, e.type,
              ${announcementSql('j', {
                type: 'e.type',
                attemptId: 'e.attempt_id',
                status: 'j.status',
                error: 'j.error',
              })}
         FROM unnest($1::uuid[], $2::uuid[], $3::text[]) AS e (job_id, attempt_id, type)
         JOIN jobs j ON j.id = e.job_id
         JOIN webhook_endpoints w ON w.owner_id = j.owner_id AND w.status = 'enabled' AND e.type = ANY (w.events)`,
      [
        announcements.map((a) => a.jobId),
        announcements.map((a) => a.attemptId ?? null),
        announcements.map((a) => a.type),
      ],
    );
  }

  /**
   * `provider.decertified` to every enabled endpoint subscribed to it, whatever its owner: the operators who asked
   * to hear when a model changed behind its name. The payload is the failing report's summary (isoTimeSql times).
   */
  async enqueueDecertified(report: CertificationReport): Promise<number> {
    const rows = await rowsOf<{ id: string }>(
      this.dataSource.manager,
      `INSERT INTO webhook_deliveries (endpoint_id, owner_id, job_id, event_type, payload)
       SELECT w.id, w.owner_id, NULL, 'provider.decertified',
              jsonb_build_object('type', 'provider.decertified', 'timestamp', ${isoTimeSql('now()')},
                'data', jsonb_build_object(
                'provider', $1::text, 'operation', $2::text, 'model', $3::text, 'contractDigest', $4::text,
                'reportId', $5::text,
                'passed', false, 'trigger', $6::text, 'cost', $7::jsonb, 'certifiedAt', $8::text))
         FROM webhook_endpoints w WHERE w.status = 'enabled' AND 'provider.decertified' = ANY (w.events)
       RETURNING id`,
      [
        report.provider,
        report.operation,
        report.model,
        report.contractDigest,
        report.id,
        report.trigger ?? 'schedule',
        JSON.stringify(report.cost ?? null),
        report.createdAt,
      ],
    );
    return rows.length;
  }

  /**
   * Takes up to `limit` due deliveries of enabled endpoints (FOR UPDATE SKIP LOCKED, so replicas never take
   * the same one) and leases them in the same statement: the attempt is counted and the delivery is due again
   * after `leaseMs`, which is how a delivery whose dispatcher died mid-call is sent again.
   *
   * Round-robin by owner, across claims: each owner's due deliveries are ranked oldest first, after the ones it
   * already has in flight (`leased_until`), and the claim takes the lowest ranks. An owner with 4 deliveries out
   * ranks its next one 5th, behind another owner's first, so one owner's backlog (2,000 endpoints, a slow
   * receiver) delays another owner's delivery by at most one turnover of the slots, not by the backlog, even
   * when slots free one at a time. The lock step re-checks the row (a delivery another dispatcher claimed
   * meanwhile is skipped or no longer due) and keeps the rank's order.
   */
  async claimDue(limit: number, leaseMs: number): Promise<ClaimedDelivery[]> {
    const rows = await rowsOf<ClaimedRow>(
      this.dataSource.manager,
      `WITH busy AS (
         SELECT owner_id, count(*) AS n FROM webhook_deliveries
          WHERE leased_until IS NOT NULL AND leased_until > now() AND status = 'pending'
          GROUP BY owner_id
       ), ranked AS (
         SELECT d.id, d.next_attempt_at,
                COALESCE(b.n, 0) + row_number() OVER (PARTITION BY d.owner_id ORDER BY d.next_attempt_at, d.id) AS turn
           FROM webhook_deliveries d LEFT JOIN busy b ON b.owner_id = d.owner_id
          WHERE d.status = 'pending' AND d.next_attempt_at <= now()
            AND EXISTS (SELECT 1 FROM webhook_endpoints w WHERE w.id = d.endpoint_id AND w.status = 'enabled')
       ), due AS (
         SELECT d.id FROM webhook_deliveries d JOIN ranked r ON r.id = d.id
          WHERE d.status = 'pending' AND d.next_attempt_at <= now()
          ORDER BY r.turn, r.next_attempt_at, d.id
          LIMIT $1
          FOR UPDATE OF d SKIP LOCKED
       )
       UPDATE webhook_deliveries d SET attempts = d.attempts + 1,
         next_attempt_at = now() + $2 * interval '1 millisecond',
              leased_until = now() + $2 * interval '1 millisecond'
         FROM due, webhook_endpoints w
        WHERE d.id = due.id AND w.id = d.endpoint_id
       RETURNING d.id, d.endpoint_id, d.attempts, d.payload::text AS payload, w.url, w.secret,
                 (SELECT array_agg(p->>'secret' ORDER BY (p->>'expiresAt')::timestamptz)
                    FROM jsonb_array_elements(w.previous_secrets) p
                   WHERE (p->>'expiresAt')::timestamptz > now()) AS previous_secrets`,
      [limit, leaseMs],
    );
    return rows.map((r) => ({
      id: r.id,
      endpointId: r.endpoint_id,
      attempts: r.attempts,
      payload: announcementBody(r.payload),
      url: r.url,
      secrets: [r.secret, ...(r.previous_secrets ?? [])],
    }));
  }

  /** A 2xx: the delivery is done and the endpoint's failure record starts over. */
  async recordSuccess(result: DeliveryResult): Promise<void> {
    await this.dataSource.query(
      `WITH d AS (
         UPDATE webhook_deliveries SET status = 'succeeded', delivered_at = now(), last_status_code = $3,
           last_error = NULL,
                leased_until = NULL
          WHERE id = $1 AND attempts = $2 AND status = 'pending'
          RETURNING endpoint_id
       ), a AS (
         INSERT INTO webhook_delivery_attempts (delivery_id, number, status_code, latency_ms)
         SELECT id, $2, $3, $4 FROM webhook_deliveries WHERE id = $1
       )
       UPDATE webhook_endpoints w SET failing_since = NULL, failed_events = 0
         FROM d WHERE w.id = d.endpoint_id AND (w.failing_since IS NOT NULL OR w.failed_events > 0)`,
      [result.id, result.number, result.statusCode, result.latencyMs],
    );
  }

  /**
   * A failed attempt: the delivery backs off (or fails when its attempts are exhausted), and the endpoint is
   * disabled when it has been failing for too long or too many events in a row failed every attempt.
   * Returns the reason when this failure disabled the endpoint.
   */
  async recordFailure(result: DeliveryResult, policy: FailurePolicy): Promise<string | undefined> {
    const rows = await rowsOf<{ disabled_now: boolean; disabled_reason: string | null }>(
      this.dataSource.manager,
      `WITH d AS (
         UPDATE webhook_deliveries
            SET status = CASE WHEN $6::bigint IS NULL THEN 'failed' ELSE 'pending' END,
                next_attempt_at = now() + COALESCE($6::bigint, 0) * interval '1 millisecond',
                last_status_code = $3, last_error = $5, leased_until = NULL
          WHERE id = $1 AND attempts = $2 AND status = 'pending'
          RETURNING endpoint_id, status
       ), a AS (
         INSERT INTO webhook_delivery_attempts (delivery_id, number, status_code, latency_ms, error)
         SELECT id, $2, $3, $4, $5 FROM webhook_deliveries WHERE id = $1
       ), x AS (
         SELECT w.id, (d.status = 'failed')::int AS exhausted,
                w.status = 'enabled' AND w.failing_since < now() - $7 * interval '1 millisecond' AS too_long,
                w.status = 'enabled' AND w.failed_events + (d.status = 'failed')::int >= $8 AS too_many
           FROM d JOIN webhook_endpoints w ON w.id = d.endpoint_id
       )
       UPDATE webhook_endpoints w
          SET failing_since = COALESCE(w.failing_since, now()), failed_events = w.failed_events + x.exhausted,
              status = CASE WHEN x.too_long OR x.too_many THEN 'disabled' ELSE w.status END,
              disabled_at = CASE WHEN x.too_long OR x.too_many THEN now() ELSE w.disabled_at END,
              disabled_reason = CASE WHEN x.too_long THEN $9 WHEN x.too_many THEN $10 ELSE w.disabled_reason END,
              updated_at = now()
         FROM x WHERE w.id = x.id
       RETURNING x.too_long OR x.too_many AS disabled_now, w.disabled_reason`,
      [
        result.id,
        result.number,
        result.statusCode,
        result.latencyMs,
        result.error,
        policy.retryInMs === null ? null : Math.round(policy.retryInMs),
        policy.disableAfterFailingMs,
        policy.disableAfterFailedEvents,
        policy.reasonFailingFor,
        policy.reasonFailedEvents,
      ],
    );
    return rows[0]?.disabled_now ? (rows[0].disabled_reason ?? undefined) : undefined;
  }

  /** The call was cut off by shutdown: recorded, and due again at once for the next dispatcher. */
  async release(result: DeliveryResult): Promise<void> {
    await this.dataSource.query(
      `WITH d AS (
         UPDATE webhook_deliveries SET next_attempt_at = now(), last_error = $5, leased_until = NULL
          WHERE id = $1 AND attempts = $2 AND status = 'pending'
       )
       INSERT INTO webhook_delivery_attempts (delivery_id, number, status_code, latency_ms, error)
       SELECT id, $2, $3, $4, $5 FROM webhook_deliveries WHERE id = $1`,
      [result.id, result.number, result.statusCode, result.latencyMs, result.error],
    );
  }

  async listForEndpoint(ownerId: string, endpointId: string, query: DeliveryPageQuery): Promise<WebhookDelivery[]> {
    const rows = await rowsOf<WebhookDeliveryRow>(
      this.dataSource.manager,
      `SELECT ${COLUMNS} FROM webhook_deliveries d
        WHERE d.owner_id = $1 AND d.endpoint_id = $2 AND ($3::uuid IS NULL OR d.job_id = $3) AND ($4::text IS NULL
          OR d.status = $4)
        ORDER BY d.created_at DESC, d.id DESC
        LIMIT $5`,
      [ownerId, endpointId, query.jobId ?? null, query.status ?? null, query.limit],
    );
    return rows.map(deliveryFromRow);
  }

  /** One more attempt, now, whatever the delivery's state: a receiver asking for a replay gets one. */
  async retryNow(ownerId: string, endpointId: string, deliveryId: string): Promise<WebhookDelivery | undefined> {
    const rows = await rowsOf<WebhookDeliveryRow>(
      this.dataSource.manager,
      `WITH u AS (
         UPDATE webhook_deliveries SET status = 'pending', next_attempt_at = now()
          WHERE owner_id = $1 AND endpoint_id = $2 AND id = $3
          RETURNING *
       )
       SELECT ${COLUMNS} FROM u d`,
      [ownerId, endpointId, deliveryId],
    );
    return rows[0] && deliveryFromRow(rows[0]);
  }
}
