import { CALL_IN_FLIGHT } from '../common/calls-in-flight.js';
import { statement } from '../database/prepared-statements.js';

/** The owners' weights and caps: their statements (docs/sql/owner-shares.sql). */

const OWNERS = `SELECT * FROM (
  SELECT COALESCE(s.owner_id, l.owner_id) AS owner_id, COALESCE(s.weight, 1)::int AS weight, s.max_concurrency,
         COALESCE(l.queued, 0)::int AS queued, COALESCE(l.in_flight, 0)::int AS in_flight, COALESCE(l.unknown,
           0)::int AS unknown,
         s.updated_at
    FROM (SELECT owner_id, sum(queued) AS queued, sum(in_flight) AS in_flight, sum(unknown) AS unknown FROM (
            SELECT owner_id, count(*) FILTER (WHERE status = 'pending') AS queued, 0 AS in_flight,
                   count(*) FILTER (WHERE status = 'unknown') AS unknown
              FROM jobs WHERE status IN ('pending', 'unknown') GROUP BY owner_id
            UNION ALL
            -- Calls in flight, as maxConcurrency counts them.
            SELECT r.owner_id, 0, count(*), 0 FROM attempts a JOIN jobs r ON r.id = a.job_id
             WHERE ${CALL_IN_FLIGHT} GROUP BY r.owner_id) x GROUP BY owner_id) l
    FULL JOIN owner_shares s ON s.owner_id = l.owner_id
) o`;

export const UPSERT_OWNER_SHARE = statement(
  'upsert_owner_share',
  `INSERT INTO owner_shares (owner_id, weight, max_concurrency) VALUES ($1, $2, $3)
         ON CONFLICT (owner_id) DO UPDATE SET weight = EXCLUDED.weight, max_concurrency = EXCLUDED.max_concurrency,
           updated_at = now()`,
);

export const RECORD_OWNER_SHARE_CHANGE = statement(
  'record_owner_share_change',
  `INSERT INTO owner_share_changes (owner_id, weight, max_concurrency, actor_key_id, actor_owner, actor_subject,
          actor_issuer) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
);

export const OWNER_SHARE = statement('owner_share', `${OWNERS} WHERE o.owner_id = $1`);

export const LIST_OWNER_SHARES = statement(
  'list_owner_shares',
  `${OWNERS} WHERE o.queued + o.in_flight + o.unknown > 0 OR o.weight <> 1 OR o.max_concurrency IS NOT NULL
        ORDER BY o.queued DESC, o.in_flight DESC, o.owner_id LIMIT $1`,
);
