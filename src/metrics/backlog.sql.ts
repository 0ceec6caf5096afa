import { CALL_IN_FLIGHT } from '../common/calls-in-flight.js';
import { statement } from '../database/prepared-statements.js';

/** The backlog metrics' statements (docs/sql/backlog.sql): reads of the jobs, and of the calls in flight. */

export const READY_BY_PROVIDER = statement(
  'backlog_ready_by_provider',
  `SELECT provider, count(*)::int AS jobs FROM (
         SELECT providers[1] AS provider FROM jobs
          WHERE next_attempt_at IS NOT NULL AND waiting_for IS NULL AND next_attempt_at <= now()
          ORDER BY next_attempt_at LIMIT $1) due
        GROUP BY provider`,
);

export const READY_AGE = statement(
  'backlog_ready_age',
  `SELECT extract(epoch FROM now() - min(next_attempt_at))::float8 AS age FROM jobs
        WHERE next_attempt_at IS NOT NULL AND waiting_for IS NULL AND next_attempt_at <= now()`,
);

export const WAITING_BY_PROVIDER = statement(
  'backlog_waiting_by_provider',
  `WITH RECURSIVE waited_on AS (
         SELECT min(waiting_for) AS provider FROM jobs WHERE waiting_for IS NOT NULL AND next_attempt_at IS NOT NULL
         UNION ALL
         SELECT (SELECT min(waiting_for) FROM jobs WHERE waiting_for > w.provider AND next_attempt_at IS NOT NULL)
           FROM waited_on w WHERE w.provider IS NOT NULL)
       SELECT w.provider, d.jobs, a.age FROM waited_on w,
         LATERAL (SELECT count(*)::int AS jobs FROM (
           SELECT 1 FROM jobs
            WHERE waiting_for = w.provider AND next_attempt_at IS NOT NULL AND next_attempt_at <= now()
            ORDER BY next_attempt_at LIMIT $1) x) d,
         LATERAL (SELECT extract(epoch FROM now() - min(next_attempt_at))::float8 AS age FROM jobs
            WHERE waiting_for = w.provider AND next_attempt_at IS NOT NULL AND next_attempt_at <= now()) a
       WHERE w.provider IS NOT NULL AND d.jobs > 0`,
);

export const TOP_OWNERS = statement(
  'backlog_top_owners',
  `SELECT owner, sum(queued)::int AS "queued", sum(in_flight)::int AS "inFlight" FROM (
         SELECT owner_id AS owner, count(*) AS queued, 0 AS in_flight FROM jobs WHERE status = 'pending'
          GROUP BY owner_id
         UNION ALL
         SELECT r.owner_id, 0, count(*) FROM attempts a JOIN jobs r ON r.id = a.job_id WHERE ${CALL_IN_FLIGHT}
          GROUP BY r.owner_id
       ) x GROUP BY owner ORDER BY 2 DESC, 3 DESC, owner LIMIT $1`,
);
