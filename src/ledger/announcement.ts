/**
 * The body of a webhook announcement, as SQL: the one builder of the two statements that write the outbox (a
 * settlement's win, SettlementRepository; every other announcement, WebhookDeliveriesRepository.enqueue), so both
 * send the same shape. Times are written as the REST API writes them (`Date.toISOString()`: UTC, milliseconds, `Z`),
 * not as jsonb renders a timestamptz (`+00:00`, microseconds). docs/operations.md#webhooks has the body.
 */
export function isoTimeSql(expression: string): string {
  return `to_char(${expression} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`;
}

/** `jsonb_build_object(...)` of one announcement; each argument is a SQL expression of the announcing statement. */
export function announcementSql(
  job: string,
  event: { type: string; attemptId: string; status: string; error: string },
): string {
  return `jsonb_build_object('type', ${event.type}, 'timestamp', ${isoTimeSql('now()')}, 'data', jsonb_build_object(
                  'jobId', ${job}.id, 'attemptId', ${event.attemptId}, 'status', ${event.status}, 'operation',
                    ${job}.operation,
                  'idempotencyKey', ${job}.idempotency_key, 'version', ${job}.version, 'result', ${job}.result, 'error',
                    ${event.error},
                  'completedBy', ${job}.completed_by, 'completedAt', ${isoTimeSql(`${job}.completed_at`)}))`;
}

/** The fields of an announcement's `data`, in the order docs/operations.md#webhooks lists them. */
const DATA_FIELDS = [
  'jobId',
  'attemptId',
  'status',
  'operation',
  'idempotencyKey',
  'version',
  'result',
  'error',
  'completedBy',
  'completedAt',
];

/**
 * The body as it is signed and sent: compact JSON in the documented field order, as the REST API writes its
 * answers, not as PostgreSQL prints a jsonb (`{"data": {"error": null, ...`, keys by length). The same stored
 * payload gives the same bytes on every retry, so one delivery keeps one signature.
 */
export function announcementBody(storedPayload: string): string {
  const { type, timestamp, data } = JSON.parse(storedPayload) as {
    type: string;
    timestamp: string;
    data: Record<string, unknown>;
  };
  if (type === 'batch.completed') return JSON.stringify({ type, timestamp, data: batchData(data) });
  const fields = type.startsWith('provider.') ? PROVIDER_DATA_FIELDS : DATA_FIELDS;
  return JSON.stringify({
    type,
    timestamp,
    data: Object.fromEntries(fields.map((field) => [field, data[field] ?? null])),
  });
}

/**
 * The fields of a `batch.completed` announcement's `data`, in the documented order. Its stored payload is built by
 * the SQL function `batch_announcement` (migration CreateBatches): the one builder of the trigger that announces a
 * batch's last job and of the create that finds every job of its batch terminal already.
 */
const BATCH_DATA_FIELDS = ['batchId', 'idempotencyKey', 'items', 'counts', 'completedAt'];
const BATCH_COUNTS = ['succeeded', 'failed', 'cancelled', 'conflict'];

function batchData(data: Record<string, unknown>): Record<string, unknown> {
  const counts = (data.counts ?? {}) as Record<string, unknown>;
  const ordered = Object.fromEntries(BATCH_DATA_FIELDS.map((field) => [field, data[field] ?? null]));
  return { ...ordered, counts: Object.fromEntries(BATCH_COUNTS.map((status) => [status, counts[status] ?? 0])) };
}

/** A provider announcement's `data` (`provider.decertified`), in the order docs/operations.md#webhooks lists them. */
const PROVIDER_DATA_FIELDS = [
  'provider',
  'operation',
  'model',
  'contractDigest',
  'reportId',
  'passed',
  'trigger',
  'cost',
  'certifiedAt',
];
