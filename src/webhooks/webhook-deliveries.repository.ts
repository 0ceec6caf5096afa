import { Injectable } from '@nestjs/common';
import { DataSource } from 'typeorm';

import { type Queryable, rowsOf } from '../database/transactions.js';
import { announcementBody } from '../ledger/announcement.js';
import type { Announcement } from '../ledger/outbox.port.js';
import type { CertificationReport } from '../providers/certification.types.js';
import {
  type ClaimedDelivery,
  deliveryFromRow,
  type DeliveryStatus,
  type WebhookDelivery,
  type WebhookDeliveryRow,
} from './webhook.types.js';
import {
  CLAIM_DUE_DELIVERIES,
  ENQUEUE,
  ENQUEUE_DECERTIFIED,
  LIST_FOR_ENDPOINT,
  RECORD_FAILURE,
  RECORD_SUCCESS,
  RELEASE,
  RETRY_NOW,
} from './webhook-deliveries.sql.js';

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
    await manager.query(ENQUEUE.text, [
      announcements.map((a) => a.jobId),
      announcements.map((a) => a.attemptId ?? null),
      announcements.map((a) => a.type),
    ]);
  }

  /**
   * `provider.decertified` to every enabled endpoint subscribed to it, whatever its owner: the operators who asked
   * to hear when a model changed behind its name. The payload is the failing report's summary (isoTimeSql times).
   */
  async enqueueDecertified(report: CertificationReport): Promise<number> {
    const rows = await rowsOf<{ id: string }>(this.dataSource.manager, ENQUEUE_DECERTIFIED, [
      report.provider,
      report.operation,
      report.model,
      report.contractDigest,
      report.id,
      report.trigger ?? 'schedule',
      JSON.stringify(report.cost ?? null),
      report.createdAt,
    ]);
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
    const rows = await rowsOf<ClaimedRow>(this.dataSource.manager, CLAIM_DUE_DELIVERIES, [limit, leaseMs]);
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
    await this.dataSource.query(RECORD_SUCCESS.text, [result.id, result.number, result.statusCode, result.latencyMs]);
  }

  /**
   * A failed attempt: the delivery backs off (or fails when its attempts are exhausted), and the endpoint is
   * disabled when it has been failing for too long or too many events in a row failed every attempt.
   * Returns the reason when this failure disabled the endpoint.
   */
  async recordFailure(result: DeliveryResult, policy: FailurePolicy): Promise<string | undefined> {
    const rows = await rowsOf<{ disabled_now: boolean; disabled_reason: string | null }>(
      this.dataSource.manager,
      RECORD_FAILURE,
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
    await this.dataSource.query(RELEASE.text, [
      result.id,
      result.number,
      result.statusCode,
      result.latencyMs,
      result.error,
    ]);
  }

  async listForEndpoint(ownerId: string, endpointId: string, query: DeliveryPageQuery): Promise<WebhookDelivery[]> {
    const rows = await rowsOf<WebhookDeliveryRow>(this.dataSource.manager, LIST_FOR_ENDPOINT, [
      ownerId,
      endpointId,
      query.jobId ?? null,
      query.status ?? null,
      query.limit,
    ]);
    return rows.map(deliveryFromRow);
  }

  /** One more attempt, now, whatever the delivery's state: a receiver asking for a replay gets one. */
  async retryNow(ownerId: string, endpointId: string, deliveryId: string): Promise<WebhookDelivery | undefined> {
    const rows = await rowsOf<WebhookDeliveryRow>(this.dataSource.manager, RETRY_NOW, [
      ownerId,
      endpointId,
      deliveryId,
    ]);
    return rows[0] && deliveryFromRow(rows[0]);
  }
}
