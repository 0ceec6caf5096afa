import type { WebhookEventType } from '../ledger/outbox.port.js';

export type EndpointStatus = 'enabled' | 'disabled';
export type DeliveryStatus = 'pending' | 'succeeded' | 'failed';

export interface WebhookEndpoint {
  id: string;
  ownerId: string;
  url: string;
  events: WebhookEventType[];
  status: EndpointStatus;
  disabledReason: string | null;
  disabledAt: Date | null;
  createdAt: Date;
}

export interface WebhookEndpointRow {
  id: string;
  owner_id: string;
  url: string;
  events: WebhookEventType[];
  status: EndpointStatus;
  disabled_reason: string | null;
  disabled_at: Date | null;
  created_at: Date;
}

export function endpointFromRow(row: WebhookEndpointRow): WebhookEndpoint {
  return {
    id: row.id,
    ownerId: row.owner_id,
    url: row.url,
    events: row.events,
    status: row.status,
    disabledReason: row.disabled_reason,
    disabledAt: row.disabled_at,
    createdAt: row.created_at,
  };
}

export interface DeliveryAttempt {
  number: number;
  statusCode: number | null;
  latencyMs: number;
  error: string | null;
  at: string;
}

export interface WebhookDelivery {
  id: string;
  endpointId: string;
  /** Null for a batch's announcement and for one about a provider (`provider.decertified`). */
  jobId: string | null;
  /** Set for `batch.completed` only. */
  batchId: string | null;
  eventType: WebhookEventType;
  status: DeliveryStatus;
  attempts: number;
  nextAttemptAt: Date | null;
  lastStatusCode: number | null;
  lastError: string | null;
  createdAt: Date;
  deliveredAt: Date | null;
  history: DeliveryAttempt[];
}

export interface WebhookDeliveryRow {
  id: string;
  endpoint_id: string;
  job_id: string | null;
  batch_id: string | null;
  event_type: WebhookEventType;
  status: DeliveryStatus;
  attempts: number;
  next_attempt_at: Date;
  last_status_code: number | null;
  last_error: string | null;
  created_at: Date;
  delivered_at: Date | null;
  /** json_agg of webhook_delivery_attempts, already in the view's shape. */
  history: DeliveryAttempt[] | null;
}

export function deliveryFromRow(row: WebhookDeliveryRow): WebhookDelivery {
  return {
    id: row.id,
    endpointId: row.endpoint_id,
    jobId: row.job_id,
    batchId: row.batch_id,
    eventType: row.event_type,
    status: row.status,
    attempts: row.attempts,
    nextAttemptAt: row.status === 'pending' ? row.next_attempt_at : null,
    lastStatusCode: row.last_status_code,
    lastError: row.last_error,
    createdAt: row.created_at,
    deliveredAt: row.delivered_at,
    history: row.history ?? [],
  };
}

/** A delivery the dispatcher claimed: everything needed to sign and send it. */
export interface ClaimedDelivery {
  id: string;
  endpointId: string;
  attempts: number;
  payload: string;
  url: string;
  secrets: string[];
}
