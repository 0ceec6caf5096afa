import { statement } from '../database/prepared-statements.js';

/**
 * The retention purge's statements (docs/sql/retention.sql): the one DELETE on the ledger's tables outside
 * src/ledger/, a documented exception (docs/design.md §9, src/ledger/only-writer.spec.ts).
 */

export const ALLOW_PURGE = statement('allow_purge', `SET LOCAL onejob.purge = 'on'`);

export const PURGE_BATCH = statement(
  'purge_batch',
  `WITH doomed AS (
           SELECT id, owner_id, operation FROM jobs
            WHERE completed_at < now() - $1 * interval '1 day' AND status IN ('succeeded', 'failed', 'cancelled')
            ORDER BY completed_at
            LIMIT $2
            FOR UPDATE SKIP LOCKED
         ), kept AS (
           -- Their attempts' spend outlives them (docs/operations.md#retention): budgets and /v1/usage read it.
           INSERT INTO purged_usage AS u (owner_id, day, operation, provider, currency, attempts, prompt_tokens,
                                          completion_tokens, cost, discarded_cost)
           SELECT d.owner_id, date_trunc('day', a.started_at, 'UTC'), d.operation, a.provider, a.cost_currency,
                  count(*), COALESCE(sum((a.usage->>'promptTokens')::bigint), 0),
                  COALESCE(sum((a.usage->>'completionTokens')::bigint), 0), COALESCE(sum(a.cost), 0),
                  COALESCE(sum(a.cost) FILTER (WHERE a.outcome = 'discarded'), 0)
             FROM doomed d JOIN attempts a ON a.job_id = d.id
            GROUP BY 1, 2, 3, 4, 5
            -- One order for every purge: two replicas' batches upsert shared rows without a deadlock.
            ORDER BY 1, 2, 3, 4, 5
           ON CONFLICT ON CONSTRAINT "UQ_purged_usage_key" DO UPDATE
              SET attempts = u.attempts + EXCLUDED.attempts, prompt_tokens = u.prompt_tokens + EXCLUDED.prompt_tokens,
                  completion_tokens = u.completion_tokens + EXCLUDED.completion_tokens, cost = u.cost + EXCLUDED.cost,
                  discarded_cost = u.discarded_cost + EXCLUDED.discarded_cost
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
