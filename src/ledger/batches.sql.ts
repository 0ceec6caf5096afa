import { statement } from '../database/prepared-statements.js';
import type { BatchProgressRow, BatchRow, ItemOutcome } from './batch.types.js';
import type { JobStatus } from './job.types.js';
import { spentSinceSql } from './spend.js';

/**
 * The batches' and their items' statements (docs/sql/batches.sql), all sent unnamed. The write statements are the
 * ledger's alone: nothing outside src/ledger/ imports this module (eslint.config.mjs, src/ledger/only-writer.spec.ts).
 * A budgeted batch locks its owner's budget with jobs.sql.ts's LOCK_BUDGET, the single creates' statement.
 */

const BATCH_COLUMNS = `b.id, b.owner_id, b.idempotency_key, b.fingerprint, b.metadata, b.priority, b.item_count,
  b.members, b.live_jobs, b.created_at, b.completed_at`;

/** A batch's progress in one query: its members' jobs per status, its conflicts, the cost of every attempt. */
const PROGRESS_COLUMNS = `${BATCH_COLUMNS},
  (SELECT json_object_agg(s.status, s.n) FROM (
     SELECT j.status, count(*)::int AS n FROM batch_items i JOIN jobs j ON j.id = i.job_id
      WHERE i.batch_id = b.id GROUP BY j.status) s) AS counts,
  (SELECT count(*)::int FROM batch_items i WHERE i.batch_id = b.id AND i.outcome = 'conflict') AS conflicts,
  (SELECT json_agg(json_build_object('currency', c.currency, 'amount', c.amount::text) ORDER BY c.currency) FROM (
     SELECT a.cost_currency AS currency, sum(a.cost) AS amount FROM batch_items i JOIN attempts a ON a.job_id = i.job_id
      WHERE i.batch_id = b.id AND a.cost IS NOT NULL GROUP BY a.cost_currency) c) AS cost`;

/** One item of a batch, as batch_items holds it. */
export interface BatchItemRow {
  ord: number;
  idempotency_key: string;
  outcome: ItemOutcome;
  job_id: string | null;
}

/**
 * The batch's own key: a second request with the same owner and key finds it taken and waits for the first one's
 * transaction, then gets no row (DO NOTHING), and answers the replay or the 409 from the stored batch.
 */
export const INSERT_BATCH = statement<
  [
    ownerId: string,
    idempotencyKey: string,
    fingerprint: string,
    metadata: string | null,
    priority: number,
    itemCount: number,
  ],
  BatchRow
>(
  'insert_batch',
  `INSERT INTO batches
  (owner_id, idempotency_key, fingerprint, metadata, priority, item_count, members, live_jobs)
VALUES ($1, $2, $3, $4::jsonb, $5, $6, $6, $6)
ON CONFLICT ON CONSTRAINT "UQ_batches_owner_idempotency_key" DO NOTHING
RETURNING ${BATCH_COLUMNS.replace(/\bb\./g, '')}`,
);

/**
 * Every item's job in one statement, with its `created` event and its membership: a key that exists already is
 * skipped (ON CONFLICT on the owner-and-key constraint only), and read afterwards by LOCK_EXISTING. Rows go in in
 * key order, as single creates do, so statements sharing keys wait on each other in one order. A budgeted owner's
 * jobs ($4 set) reserve their worst case at the chain's dearest price, as JobsRepository's budgeted create does.
 * `priority` (the batch's) is each job's own priority (fair share, docs/design.md#fair-share).
 */
export const INSERT_BATCH_JOBS = statement<
  [records: string, ownerId: string, batchId: string, currency: string | null, traceContext: string | null],
  { ord: number; id: string }
>(
  'insert_batch_jobs',
  `WITH x AS MATERIALIZED (
    SELECT * FROM jsonb_to_recordset($1::jsonb) AS x(ord int, idempotency_key text, fingerprint text, operation text,
      input jsonb, providers text[], waiting_for text, priority int, prompt_tokens int, completion_tokens int)
  ), j AS (
    INSERT INTO jobs (owner_id, idempotency_key, fingerprint, operation, input, providers, trace_context, waiting_for,
                      priority, reserved_cost, reserved_currency)
    SELECT $2, x.idempotency_key, x.fingerprint, x.operation, x.input, x.providers, $5, x.waiting_for, x.priority,
           CASE WHEN $4::text IS NOT NULL THEN
             (SELECT COALESCE(max(round((x.prompt_tokens * p.input_per_mtok + x.completion_tokens * p.output_per_mtok)
                                        / 1000000, 8)), 0)
                FROM provider_prices p WHERE p.provider = ANY (x.providers) AND p.currency = $4) END,
           $4
      FROM x ORDER BY x.idempotency_key
    ON CONFLICT ON CONSTRAINT "UQ_jobs_owner_idempotency_key" DO NOTHING
    RETURNING id, idempotency_key
  ), e AS (
    INSERT INTO job_events (job_id, subject, from_status, to_status, reason)
    SELECT id, 'job', NULL, 'pending', 'created' FROM j
  ), m AS (
    INSERT INTO batch_items (batch_id, ord, idempotency_key, job_id, outcome)
    SELECT $3, x.ord, x.idempotency_key, j.id, 'created' FROM j JOIN x ON x.idempotency_key = j.idempotency_key
  )
  SELECT x.ord, j.id FROM j JOIN x ON x.idempotency_key = j.idempotency_key`,
);

/**
 * The jobs the keys skipped by INSERT_BATCH_JOBS name, share-locked in id order: a settlement of one of them (which
 * locks it FOR UPDATE) either committed before this read, and its status is read here, or waits for the batch to
 * commit, and then finds the batch's membership and counts the job down (the trigger of migration CreateBatches).
 */
export const LOCK_EXISTING = statement<
  [ownerId: string, keys: string[]],
  { id: string; idempotency_key: string; fingerprint: string; status: JobStatus }
>(
  'lock_existing_jobs_of_keys',
  `SELECT j.id, j.idempotency_key, j.fingerprint, j.status FROM jobs j
  WHERE j.owner_id = $1 AND j.idempotency_key = ANY ($2::text[]) ORDER BY j.id FOR SHARE`,
);

/**
 * The items that did not create a job, the batch's members (its items but the conflicts) and its live ones. A
 * conflict's job id goes to conflict_job_id, not job_id: job_id is membership (progress, the settlement trigger,
 * the cancel).
 */
export const FINISH_BATCH = statement<
  [
    batchId: string,
    ords: number[],
    keys: string[],
    jobIds: (string | null)[],
    outcomes: ItemOutcome[],
    liveJobs: number,
  ],
  BatchRow
>(
  'finish_batch',
  `WITH m AS (
    INSERT INTO batch_items (batch_id, ord, idempotency_key, job_id, conflict_job_id, outcome)
    SELECT $1, o.ord, o.idempotency_key, CASE WHEN o.outcome <> 'conflict' THEN o.job_id END,
           CASE WHEN o.outcome = 'conflict' THEN o.job_id END, o.outcome
      FROM unnest($2::int[], $3::text[], $4::uuid[], $5::text[]) AS o(ord, idempotency_key, job_id, outcome)
  )
  UPDATE batches SET live_jobs = $6, members = item_count - cardinality(array_positions($5::text[], 'conflict')),
         completed_at = CASE WHEN $6 = 0 THEN now() END
   WHERE id = $1
  RETURNING ${BATCH_COLUMNS.replace(/\bb\./g, '')}`,
);

/**
 * Under the budget lock: what the owner spent this month plus what its live jobs still hold (as
 * INSERT_JOBS_WITHIN_BUDGET of jobs.sql.ts counts it), and the worst case of the batch's new jobs. The batch
 * is admitted whole when its last new job would be admitted as a single create is (what is ahead of it below the
 * limit), or refused whole.
 */
export const BUDGET_CHECK = statement<
  [records: string, ownerId: string, currency: string],
  { used: string; total: string; last: string | null }
>(
  'check_batch_budget',
  `WITH x AS (
    SELECT * FROM jsonb_to_recordset($1::jsonb) AS x(ord int, idempotency_key text, providers text[],
      prompt_tokens int, completion_tokens int)
  ), fresh AS (
    SELECT x.ord,
           (SELECT COALESCE(max(round((x.prompt_tokens * p.input_per_mtok
                                       + x.completion_tokens * p.output_per_mtok) / 1000000, 8)), 0)
              FROM provider_prices p WHERE p.provider = ANY (x.providers) AND p.currency = $3) AS cost
      FROM x WHERE NOT EXISTS (SELECT 1 FROM jobs k WHERE k.owner_id = $2 AND k.idempotency_key = x.idempotency_key)
  )
  SELECT ${spentSinceSql('$2', '$3', "date_trunc('month', now(), 'UTC')")}
       + (SELECT COALESCE(sum(GREATEST(j.reserved_cost - COALESCE(
                    (SELECT sum(a.cost) FROM attempts a WHERE a.job_id = j.id AND a.cost_currency = $3), 0), 0)), 0)
            FROM jobs j
           WHERE j.owner_id = $2 AND j.status IN ('pending', 'running', 'unknown') AND j.reserved_currency = $3)
         AS used,
         (SELECT COALESCE(sum(cost), 0) FROM fresh) AS total,
         (SELECT cost FROM fresh ORDER BY ord DESC LIMIT 1) AS last`,
);

/** A batch whose every job was terminal when it was written: its announcement, in the same transaction. */
export const ANNOUNCE_COMPLETED = statement<[batchId: string], { n: number }>(
  'announce_batch_completed',
  'SELECT announce_batch_completed($1) AS n',
);

/** The owner's batch under this key: a replay's read. */
export const FIND_OWNED_BY_KEY = statement<[ownerId: string, idempotencyKey: string], BatchRow>(
  'find_owned_batch_by_key',
  `SELECT ${BATCH_COLUMNS} FROM batches b WHERE b.owner_id = $1 AND b.idempotency_key = $2`,
);

/** A batch with its progress; `ownerId` null reads any owner's (ops:read). */
export const FIND_PROGRESS = statement<[id: string, ownerId: string | null], BatchProgressRow>(
  'find_batch_progress',
  `SELECT ${PROGRESS_COLUMNS} FROM batches b WHERE b.id = $1 AND ($2::text IS NULL OR b.owner_id = $2)`,
);

/**
 * The newest stream id of each of these batches (the live streams' sweep; ids that name no batch are skipped), from
 * the batch rows alone (BatchProgressSource's ids, batchStreamIds): its members plus two once it is complete, else
 * its terminal members plus one.
 */
export const LATEST_STREAM_IDS = statement<[ids: string[]], { id: string; latest: string }>(
  'latest_batch_stream_ids',
  `SELECT b.id, (CASE WHEN b.completed_at IS NOT NULL THEN b.members + 2
                      ELSE b.members - b.live_jobs + 1 END)::text AS latest
     FROM batches b WHERE b.id = ANY ($1::uuid[])`,
);

/** Every item of a batch, in order: the answer a replay repeats (a conflict with the job its key named). */
export const ALL_ITEMS = statement<[batchId: string], BatchItemRow>(
  'all_batch_items',
  `SELECT ord, idempotency_key, outcome, COALESCE(job_id, conflict_job_id) AS job_id
         FROM batch_items WHERE batch_id = $1 ORDER BY ord`,
);

/**
 * A page of a batch's items in index order with their jobs' state, keyset on the index (-1: the first page). A
 * conflict names the job its key named, but that job is no member: no state of it is the batch's.
 */
export const LIST_ITEMS = statement<
  [batchId: string, afterIndex: number, status: JobStatus | null, limit: number],
  BatchItemRow & { status: JobStatus | null; version: number | null; completed_at: Date | null }
>(
  'list_batch_items',
  `SELECT i.ord, i.idempotency_key, i.outcome, COALESCE(i.job_id, i.conflict_job_id) AS job_id, j.status, j.version,
              j.completed_at
         FROM batch_items i LEFT JOIN jobs j ON j.id = i.job_id
        WHERE i.batch_id = $1 AND i.ord > $2 AND ($3::text IS NULL OR j.status = $3)
        ORDER BY i.ord LIMIT $4`,
);

/** A list page's cursor: the batch it names, if the owner's. */
export const BATCH_CURSOR = statement<[id: string, ownerId: string]>(
  'batch_cursor',
  'SELECT 1 FROM batches WHERE id = $1 AND owner_id = $2',
);

/** The owner's batches, newest first, keyset on (created_at, id) after the cursor's batch ($3, null: the first). */
export const LIST_OWNED = statement<[ownerId: string, limit: number, afterId: string | null], BatchRow>(
  'list_owned_batches',
  `SELECT ${BATCH_COLUMNS} FROM batches b
        WHERE b.owner_id = $1
          AND ($3::uuid IS NULL OR (b.created_at, b.id) < (SELECT c.created_at, c.id FROM batches c WHERE c.id = $3))
        ORDER BY b.created_at DESC, b.id DESC LIMIT $2`,
);

/**
 * The ids of the jobs the batch created that are not terminal, in id order (the order the cancel locks them in).
 * A replayed member is a job some other request created (a single create, another batch): not this batch's to
 * cancel.
 */
export const LIVE_JOB_IDS = statement<[batchId: string], { id: string }>(
  'live_created_job_ids_of_batch',
  `SELECT j.id FROM batch_items i JOIN jobs j ON j.id = i.job_id
        WHERE i.batch_id = $1 AND i.outcome = 'created' AND j.status IN ('pending', 'running', 'unknown')
        ORDER BY j.id`,
);
