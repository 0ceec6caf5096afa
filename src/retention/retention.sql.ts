import { statement } from '../database/prepared-statements.js';

/**
 * The retention purge's statements (docs/sql/retention.sql): the one DELETE on the ledger's tables outside
 * src/ledger/, a documented exception (docs/design.md §9, src/ledger/only-writer.spec.ts).
 */

export const ALLOW_PURGE = statement('allow_purge', `SET LOCAL onejob.purge = 'on'`);

export const PURGE_BATCH = statement(
  'purge_batch',
  `WITH doomed AS (
           SELECT id FROM jobs
            WHERE completed_at < now() - $1 * interval '1 day' AND status IN ('succeeded', 'failed', 'cancelled')
            ORDER BY completed_at
            LIMIT $2
            FOR UPDATE SKIP LOCKED
         ), deliveries AS (
           DELETE FROM webhook_deliveries WHERE job_id IN (SELECT id FROM doomed) RETURNING status
         ), events AS (
           DELETE FROM job_events WHERE job_id IN (SELECT id FROM doomed)
         ), attempts AS (
           DELETE FROM attempts WHERE job_id IN (SELECT id FROM doomed)
         ), purged AS (
           DELETE FROM jobs WHERE id IN (SELECT id FROM doomed) RETURNING id
         )
         SELECT (SELECT count(*) FROM purged)::int AS purged,
                (SELECT count(*) FROM deliveries WHERE status = 'pending')::int AS pending_deliveries`,
);
