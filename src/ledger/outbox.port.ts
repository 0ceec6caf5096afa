import type { Queryable } from '../database/transactions.js';

export const WEBHOOK_EVENT_TYPES = [
  'job.succeeded',
  'job.failed',
  'job.cancelled',
  'attempt.unknown',
  'batch.completed',
  'provider.decertified',
] as const;
export type WebhookEventType = (typeof WEBHOOK_EVENT_TYPES)[number];
/**
 * What the ledger announces about one job; `batch.completed` is written by the database (migration CreateBatches),
 * `provider.decertified` by the recertifier.
 */
export type JobEventType = Exclude<WebhookEventType, 'batch.completed' | 'provider.decertified'>;

/** A transition the ledger announces to the job owner's subscribed webhook endpoints. */
export interface Announcement {
  jobId: string;
  attemptId?: string;
  type: JobEventType;
}

/**
 * The transactional outbox seen from the ledger (docs/operations.md#webhooks). `enqueue` runs on the ledger's
 * transaction before commit, so a committed settlement is always announced and a rolled-back one never is;
 * `announced` runs after commit to wake the dispatcher. The webhooks module provides it; without it the ledger
 * announces nothing.
 */
export interface Outbox {
  enqueue(announcements: Announcement[], manager: Queryable): Promise<void>;
  announced(): void;
}

export const OUTBOX = Symbol('OUTBOX');
