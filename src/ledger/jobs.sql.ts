import { CALL_IN_FLIGHT } from '../common/calls-in-flight.js';
import { dynamic, prepared, statement } from '../database/prepared-statements.js';
import { JOB_COLUMNS, listedJobColumns } from './job-columns.js';
import { spentSinceSql } from './spend.js';

/**
 * The jobs table's statements (docs/sql/jobs.sql). The write statements are the ledger's alone: nothing outside
 * src/ledger/ imports this module (eslint.config.mjs, src/ledger/only-writer.spec.ts).
 */

export const ATTEMPTS_OF_J = `COALESCE((SELECT json_agg(a ORDER BY a.number) FROM attempts a WHERE a.job_id = j.id),
  '[]'::json) AS attempts`;

export const WITH_ATTEMPTS = `SELECT ${JOB_COLUMNS}, ${ATTEMPTS_OF_J} FROM jobs j`;

// The request path's statements: a create, a replay's read, a get (database/prepared-statements.ts). The bench's
// floor server (bench/floor.server.ts) runs INSERT_JOB and FIND_OWNED_BY_ID too.
export const INSERT_JOB = prepared(
  'insert_job',
  `WITH j AS (
    INSERT INTO jobs (owner_id, idempotency_key, fingerprint, operation, input, providers, trace_context, waiting_for,
      priority)
    VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7, $8, $9)
    RETURNING *
  ), e AS (
    INSERT INTO job_events (job_id, subject, from_status, to_status, reason)
    SELECT id, 'job', NULL, 'pending', 'created' FROM j
  )
  SELECT ${JOB_COLUMNS} FROM j`,
);
/**
 * The creates that arrive together, in one statement (JobsRepository.insertJob). A key that exists already is
 * skipped (its request replays or gets 409, as a unique violation would have answered), and only the constraint
 * of the owner and key is: any other error fails the statement. Rows go in in key order, so two statements that
 * share keys wait on each other in one order and never deadlock.
 */
export const INSERT_JOBS = prepared(
  'insert_jobs',
  `WITH x AS (
    SELECT * FROM jsonb_to_recordset($1::jsonb) AS x(owner_id text, idempotency_key text, fingerprint text,
      operation text,
      input jsonb, providers text[], trace_context text, waiting_for text, priority smallint)
  ), j AS (
    INSERT INTO jobs (owner_id, idempotency_key, fingerprint, operation, input, providers, trace_context, waiting_for,
      priority)
    SELECT owner_id, idempotency_key, fingerprint, operation, input, providers, trace_context, waiting_for,
      priority FROM x
     ORDER BY owner_id, idempotency_key
    ON CONFLICT ON CONSTRAINT "UQ_jobs_owner_idempotency_key" DO NOTHING
    RETURNING *
  ), e AS (
    INSERT INTO job_events (job_id, subject, from_status, to_status, reason)
    SELECT id, 'job', NULL, 'pending', 'created' FROM j
  )
  SELECT ${JOB_COLUMNS} FROM j`,
);
/**
 * A budgeted owner's creates, run right after LOCK_BUDGET in one transaction, so the sum it reads includes every
 * job the previous holder of the lock committed. Each create reserves its worst case (its tokens at the dearest
 * price, in the budget's currency, of provider_prices for its chain, the table the attempts' pricing trigger reads)
 * and is admitted while what is spent this month plus what live jobs still hold plus the creates ahead of it in
 * this statement is below the limit: no burst passes the budget by more than one job's worst case. A key that
 * exists already is not counted and comes back as a collision (replay or 409), as in INSERT_JOBS.
 */
export const INSERT_JOBS_WITHIN_BUDGET = prepared(
  'insert_jobs_within_budget',
  `WITH x AS (
    SELECT * FROM jsonb_to_recordset($1::jsonb) AS x(ord int, owner_id text, idempotency_key text, fingerprint text,
      operation text, input jsonb, providers text[], trace_context text, waiting_for text, priority smallint,
      prompt_tokens int, completion_tokens int)
  ), fresh AS (
    SELECT x.*, (SELECT COALESCE(max(round((x.prompt_tokens * p.input_per_mtok
                                            + x.completion_tokens * p.output_per_mtok) / 1000000, 8)), 0)
                   FROM provider_prices p WHERE p.provider = ANY(x.providers) AND p.currency = $3) AS reserved_cost
      FROM x
     WHERE NOT EXISTS (SELECT 1 FROM jobs k WHERE k.owner_id = x.owner_id AND k.idempotency_key = x.idempotency_key)
  ), used AS (
    SELECT ${spentSinceSql('$2', '$3', "date_trunc('month', now(), 'UTC')")}
         + (SELECT COALESCE(sum(GREATEST(j.reserved_cost
                    - COALESCE((SELECT sum(a.cost) FROM attempts a WHERE a.job_id = j.id AND a.cost_currency = $3), 0),
                      0)), 0)
              FROM jobs j WHERE j.owner_id = $2 AND j.status IN ('pending', 'running',
                'unknown') AND j.reserved_currency = $3)
           AS amount
  ), admitted AS (
    SELECT f.* FROM (SELECT f.*, sum(f.reserved_cost) OVER (ORDER BY f.ord) - f.reserved_cost AS ahead FROM fresh f) f,
      used
     WHERE used.amount + f.ahead < $4
  ), j AS (
    INSERT INTO jobs (owner_id, idempotency_key, fingerprint, operation, input, providers, trace_context, waiting_for,
                      priority, reserved_cost, reserved_currency)
    SELECT owner_id, idempotency_key, fingerprint, operation, input, providers, trace_context, waiting_for, priority,
           reserved_cost, $3
      FROM admitted ORDER BY owner_id, idempotency_key
    ON CONFLICT ON CONSTRAINT "UQ_jobs_owner_idempotency_key" DO NOTHING
    RETURNING *
  ), e AS (
    INSERT INTO job_events (job_id, subject, from_status, to_status, reason)
    SELECT id, 'job', NULL, 'pending', 'created' FROM j
  )
  SELECT x.ord, (f.ord IS NOT NULL AND a.ord IS NULL) AS refused, (SELECT amount FROM used) AS used, ${JOB_COLUMNS}
    FROM x LEFT JOIN fresh f ON f.ord = x.ord LEFT JOIN admitted a ON a.ord = x.ord
    LEFT JOIN j ON j.owner_id = x.owner_id AND j.idempotency_key = x.idempotency_key
   ORDER BY x.ord`,
);
/** The per-owner serialisation of budgeted creates: every replica's creates for one owner queue on this row. */
export const LOCK_BUDGET = prepared(
  'lock_budget',
  `SELECT monthly_limit, currency FROM owner_budgets WHERE owner_id = $1 FOR UPDATE`,
);
export const FIND_OWNED_BY_ID = prepared(
  'find_owned_job_by_id',
  `${WITH_ATTEMPTS} WHERE j.id = $1 AND j.owner_id = $2`,
);
export const FIND_OWNED_BY_KEY = prepared(
  'find_owned_job_by_key',
  `${WITH_ATTEMPTS} WHERE j.owner_id = $1 AND j.idempotency_key = $2`,
);
export const JOB_STATUSES = prepared('job_statuses', 'SELECT id, status FROM jobs WHERE id = ANY($1::uuid[])');

/**
 * How far behind the furthest owner present an owner's pass may lag, in that owner's own slots (FAIR_CREDIT /
 * weight in pass units, which count slots per unit of weight): the credit an owner back from idle (or new) may
 * spend before the others' turns, and the slack that absorbs the jobs two replicas' concurrent claims give one
 * owner from the same snapshot (docs/design.md#fair-share). In pass units it would be FAIR_CREDIT * weight slots:
 * 400 for a newcomer of weight 100.
 */
export const FAIR_CREDIT = 4;

/** An owner's calls in flight (CALL_IN_FLIGHT), as a scalar subquery on the owner named by `owner`. */
const IN_FLIGHT_OF = (owner: string) => `(SELECT count(*) FROM attempts a JOIN jobs r ON r.id = a.job_id
          WHERE ${CALL_IN_FLIGHT} AND r.owner_id = ${owner})`;

/** A due job (the index predicates of IDX_jobs_due_owner and IDX_jobs_waiting_owner, and the due time). */
export const DUE = `next_attempt_at IS NOT NULL AND next_attempt_at <= now()
  AND status IN ('pending', 'running', 'unknown')`;

/**
 * DUE within one owner's range, for a read of that owner's jobs by its own index (IDX_jobs_due_owner,
 * IDX_jobs_waiting_owner), which cannot bound its range by the time anyway. The `+ interval '0'` keeps the time out
 * of any index condition: otherwise, with statistics older than the due times (a backlog made due after the last
 * ANALYZE, or simply time passing), the planner reads every due job of every owner through IDX_jobs_due per owner
 * (70 ms a claim at 20,000 owners on PostgreSQL 18, against 9 ms).
 */
const DUE_OF_OWNER = `next_attempt_at IS NOT NULL AND next_attempt_at + interval '0' <= now()
  AND status IN ('pending', 'running', 'unknown')`;

/**
 * How many owners a claim reads per set from the owner queue (OWNERS_PER_SET, docs/design.md#fair-share): the
 * window's size, so that a window of owners with one due job each is filled from one read.
 */
export const ownersPerSet = (limit: number) => limit;

/**
 * A claim's first statement (the claim path's others are in attempts.repository.ts), fair between owners
 * (docs/design.md#fair-share). The slots are sets: the worker's window for free jobs ($1), and each capped
 * provider's room now for the jobs waiting on it ($2, $3). Per set:
 * 1. the owners with work due: the $4 with the smallest pass from the owner queue's `now` rows (IDX_owner_queue_pass)
 *    and the $4 whose `later` rows fell due first (IDX_owner_queue_later), their rows locked with SKIP LOCKED so
 *    that concurrent claims read different owners; when fewer than $4 are free, the others' `now` owners too,
 *    unlocked (a few owners with deep backlogs are still claimed from side by side);
 * 2. of those, the room's count by first tag; per owner, its highest priority then oldest due jobs, locked with
 *    SKIP LOCKED, at most its quota: its weighted share of the room plus one, within its cap's headroom
 *    (approximate here, from this snapshot; exact in Ledger.shareOut);
 * 3. stride scheduling: the n-th job of an owner gets the tag start + n / weight, where start is the owner's pass
 *    (slots served per unit of weight, owner_shares) raised to within FAIR_CREDIT of its own slots (FAIR_CREDIT /
 *    weight in pass units) of the furthest owner queued (the highest pass in the sets' queues, or of the owners
 *    read), so an owner back from idle (or new) has at most FAIR_CREDIT slots of credit to spend, whatever its
 *    weight; ties go by a coin per owner and claim, so concurrent claims from one snapshot spread over the tied
 *    owners;
 * 4. the smallest tags fill each set's room, then the worker's window across sets, in tag order.
 * `more` is true when an owner's quota, not the room, stopped its share, or more owners are queued than were read:
 * more is due than one claim took. `tidy_*`: the queue rows this claim holds whose owner had fewer due jobs than its
 * quota, for JobsRepository.tidyOwnerQueue once the claim committed; `held_*`: every queue row it holds, whose pass
 * CHARGE_OWNERS brings up to the owner's. Always one row at least: with nothing picked,
 * one whose job columns are NULL.
 */
export const CLAIM_DUE = prepared(
  'claim_due',
  `WITH sets AS (
         SELECT NULL::text AS provider, ''::text AS queue, $1::int AS room
         UNION ALL
         SELECT q.provider, q.provider, q.room FROM unnest($2::text[], $3::int[]) AS q(provider, room) WHERE q.room > 0
       ), held AS MATERIALIZED (
         SELECT s.provider, s.queue, s.room, r.owner_id
           FROM sets s CROSS JOIN LATERAL (
             SELECT owner_id FROM owner_queue WHERE queue = s.queue AND NOT later
              ORDER BY pass, owner_id LIMIT $4 FOR NO KEY UPDATE SKIP LOCKED
           ) r
         UNION ALL
         SELECT s.provider, s.queue, s.room, r.owner_id
           FROM sets s CROSS JOIN LATERAL (
             SELECT owner_id FROM owner_queue WHERE queue = s.queue AND later AND due_at <= now()
              ORDER BY due_at LIMIT $4 FOR NO KEY UPDATE SKIP LOCKED
           ) r
       ), seen AS MATERIALIZED (
         SELECT provider, queue, room, owner_id, true AS held FROM held
         UNION ALL
         SELECT s.provider, s.queue, s.room, r.owner_id, false
           FROM sets s CROSS JOIN LATERAL (
             SELECT q.owner_id FROM owner_queue q WHERE q.queue = s.queue AND NOT q.later
                AND NOT EXISTS (SELECT 1 FROM held h WHERE h.queue = s.queue AND h.owner_id = q.owner_id)
              ORDER BY q.pass, q.owner_id LIMIT $4
           ) r
          WHERE (SELECT count(*) FROM held h WHERE h.queue = s.queue) < $4
       ), demand AS MATERIALIZED (
         SELECT provider, queue, room, owner_id, bool_or(held) AS held
           FROM seen GROUP BY provider, queue, room, owner_id
       ), top AS (
         SELECT max(x.pass) AS pass FROM sets s CROSS JOIN LATERAL (
           SELECT pass FROM owner_queue WHERE queue = s.queue AND NOT later ORDER BY pass DESC LIMIT 1) x
       ), owners AS MATERIALIZED (
         SELECT o.owner_id, o.weight, o.headroom, o.capped,
                GREATEST(o.pass, GREATEST(max(o.pass) OVER (), COALESCE((SELECT pass FROM top), 0))
                                 - ${FAIR_CREDIT} / o.weight) AS start,
                random() AS coin
           FROM (SELECT d.owner_id, COALESCE(s.weight, 1)::float8 AS weight, COALESCE(s.pass, 0) AS pass,
                        s.max_concurrency IS NOT NULL AS capped,
                        CASE WHEN s.max_concurrency IS NULL THEN $1::int
                             ELSE LEAST($1::int, GREATEST(0, s.max_concurrency - ${IN_FLIGHT_OF('d.owner_id')}))::int
                        END AS headroom
                   FROM (SELECT DISTINCT owner_id FROM demand) d LEFT JOIN owner_shares s ON s.owner_id = d.owner_id) o
       ), quotas AS MATERIALIZED (
         SELECT r.*, LEAST(r.room, r.headroom,
                           ceil(r.room * r.weight / sum(r.weight) OVER (PARTITION BY r.provider))::int + 1) AS quota,
                LEAST(r.room, r.headroom) AS bound, count(*) OVER (PARTITION BY r.provider) < r.owners AS cut
           FROM (SELECT d.provider, d.queue, d.room, d.owner_id, d.held,
                        o.start, o.weight, o.capped, o.headroom, o.coin,
                        row_number() OVER (PARTITION BY d.provider ORDER BY o.start + 1 / o.weight, o.coin) AS place,
                        count(*) OVER (PARTITION BY d.provider) AS owners
                   FROM demand d JOIN owners o ON o.owner_id = d.owner_id WHERE o.headroom > 0) r
          WHERE r.place <= r.room
       ), candidates AS MATERIALIZED (
         SELECT q.provider, q.room, q.owner_id, q.start, q.weight, q.coin, q.quota, q.bound,
                c.id, c.priority, c.next_attempt_at
           FROM quotas q CROSS JOIN LATERAL (
             SELECT id, priority, next_attempt_at FROM jobs
              WHERE owner_id = q.owner_id AND waiting_for IS NULL AND ${DUE_OF_OWNER}
              ORDER BY priority DESC, next_attempt_at LIMIT q.quota FOR UPDATE SKIP LOCKED
           ) c WHERE q.provider IS NULL
         UNION ALL
         SELECT q.provider, q.room, q.owner_id, q.start, q.weight, q.coin, q.quota, q.bound,
                c.id, c.priority, c.next_attempt_at
           FROM quotas q CROSS JOIN LATERAL (
             SELECT id, priority, next_attempt_at FROM jobs
              WHERE waiting_for = q.provider AND owner_id = q.owner_id AND ${DUE_OF_OWNER}
              ORDER BY priority DESC, next_attempt_at LIMIT q.quota FOR UPDATE SKIP LOCKED
           ) c WHERE q.provider IS NOT NULL
       ), in_sets AS (
         SELECT x.* FROM (
           SELECT c.*, row_number() OVER (PARTITION BY c.provider ORDER BY c.start + c.turn / c.weight, c.coin,
             c.turn) AS slot
             FROM (SELECT c.*, row_number() OVER (PARTITION BY c.provider, c.owner_id
                                                   ORDER BY c.priority DESC, c.next_attempt_at) AS turn
                     FROM candidates c) c
         ) x WHERE x.slot <= x.room
       ), picked AS (
         SELECT p.id, p.owner_id, p.tag, p.coin, p.start, p.weight FROM (
           SELECT s.id, s.owner_id, s.start, s.weight, s.coin,
                  s.start + row_number() OVER (PARTITION BY s.owner_id ORDER BY s.priority DESC, s.next_attempt_at)
                            / s.weight AS tag
             FROM in_sets s
         ) p ORDER BY p.tag, p.coin LIMIT $1
       ), more AS (
         SELECT EXISTS (SELECT 1 FROM quotas q WHERE q.cut)
             OR EXISTS (SELECT 1 FROM candidates c WHERE c.quota < c.bound GROUP BY c.provider, c.owner_id, c.quota
                         HAVING count(*) >= c.quota)
             OR EXISTS (SELECT 1 FROM seen GROUP BY queue HAVING count(*) FILTER (WHERE held) >= $4) AS more
       ), tidy AS (
         SELECT array_agg(q.queue) FILTER (WHERE q.empty) AS queues,
                array_agg(q.owner_id) FILTER (WHERE q.empty) AS owners,
                array_agg(q.queue) AS held_queues, array_agg(q.owner_id) AS held_owners
           FROM (SELECT q.queue, q.owner_id, COALESCE(n.n, 0) < q.quota AS empty
                   FROM quotas q LEFT JOIN (SELECT COALESCE(provider, '') AS queue, owner_id, count(*) AS n
                                              FROM candidates GROUP BY 1, 2) n
                     ON n.queue = q.queue AND n.owner_id = q.owner_id
                  WHERE q.held) q
       )
       SELECT ${JOB_COLUMNS}, ${ATTEMPTS_OF_J}, p.start, p.weight, o.capped,
              (SELECT count(DISTINCT owner_id) FROM demand)::int AS owners_present, (SELECT more FROM more) AS more,
              t.queues AS tidy_queues, t.owners AS tidy_owners, t.held_queues, t.held_owners
         FROM tidy t LEFT JOIN (picked p JOIN jobs j ON j.id = p.id JOIN owners o ON o.owner_id = p.owner_id) ON true
        ORDER BY p.tag, p.coin`,
);

/**
 * After a claim committed: the queue rows it found empty, recomputed under each owner's exclusive lock, tried
 * (onejob_tidy_owner_queue, migrations/1795979600000-CreateOwnerQueue.ts). Sent on its own, not in the claim's
 * transaction: it waits for nothing, and nothing waits for it but a create of one of those owners, for a moment.
 */
export const TIDY_OWNER_QUEUE = statement<[queues: string[], owners: string[]]>(
  'tidy_owner_queue',
  `SELECT onejob_tidy_owner_queue($1::text[], $2::text[]) AS tidied`,
);

/**
 * The claim while one owner alone has due work (docs/design.md#fair-share, the sole-owner claim): with nobody to be
 * fair to, its highest priority then oldest first, as before fair share, at a fraction of CLAIM_DUE's planning and
 * execution (docs/benchmarks.md). `sets` are the loose scans' first two probes in each set with room (its lowest
 * owner with due work, and the next one after it): only when every set names one and the same owner, with no
 * other after it, and that owner has no cap, are its jobs read and locked with SKIP LOCKED. (Not a `max`: a
 * backward scan would walk every running job's future deadline before it found a due one.) Otherwise nothing is
 * locked and the one row, `fair` true, sends the claim on to CLAIM_DUE in the same transaction: a second owner's
 * first job is never one claim late. One row with a NULL id and `fair` false: nothing is due where there is room.
 */
export const CLAIM_SOLE = prepared(
  'claim_sole',
  `WITH sets AS MATERIALIZED (
         SELECT f.lo, (SELECT min(owner_id) FROM jobs WHERE waiting_for IS NULL AND owner_id > f.lo AND ${DUE}) AS next
           FROM (SELECT (SELECT min(owner_id) FROM jobs WHERE waiting_for IS NULL AND ${DUE}) AS lo) f
         UNION ALL
         SELECT w.lo,
                (SELECT min(owner_id) FROM jobs WHERE waiting_for = w.provider AND owner_id > w.lo AND ${DUE}) AS next
           FROM (SELECT q.provider, (SELECT min(owner_id) FROM jobs WHERE waiting_for = q.provider AND ${DUE}) AS lo
                   FROM unnest($2::text[], $3::int[]) AS q(provider, room) WHERE q.room > 0) w
       ), span AS MATERIALIZED (
         SELECT min(lo) AS lo, max(lo) AS hi, bool_or(next IS NOT NULL) AS others FROM sets
       ), sole AS MATERIALIZED (
         SELECT s.lo AS owner_id FROM span s
          WHERE s.lo = s.hi AND NOT s.others
            AND NOT EXISTS (SELECT 1 FROM owner_shares o WHERE o.owner_id = s.lo AND o.max_concurrency IS NOT NULL)
       ), free AS (
         SELECT id, priority, next_attempt_at FROM jobs
          WHERE owner_id = (SELECT owner_id FROM sole) AND waiting_for IS NULL AND ${DUE_OF_OWNER}
          ORDER BY priority DESC, next_attempt_at LIMIT $1 FOR UPDATE SKIP LOCKED
       ), waiting AS (
         SELECT w.id, w.priority, w.next_attempt_at FROM unnest($2::text[], $3::int[]) AS q(provider, room)
          CROSS JOIN LATERAL (
            SELECT id, priority, next_attempt_at FROM jobs
             WHERE waiting_for = q.provider AND owner_id = (SELECT owner_id FROM sole) AND ${DUE_OF_OWNER}
             ORDER BY priority DESC, next_attempt_at LIMIT q.room FOR UPDATE SKIP LOCKED
          ) w
          WHERE q.room > 0
       ), picked AS (
         SELECT id, priority, next_attempt_at FROM (SELECT * FROM free UNION ALL SELECT * FROM waiting) x
          ORDER BY priority DESC, next_attempt_at LIMIT $1
       )
       SELECT ${JOB_COLUMNS}, ${ATTEMPTS_OF_J}, s.lo IS NOT NULL AND NOT EXISTS (SELECT 1 FROM sole) AS fair
         FROM span s LEFT JOIN (picked p JOIN jobs j ON j.id = p.id) ON true
        ORDER BY p.priority DESC, p.next_attempt_at`,
);

/**
 * A claim's charges (JobsRepository.chargeOwners): `inc` is the jobs it took over the owner's weight. Upserted in
 * owner order, so two claims charging the same owners wait on each other in one order and never deadlock. The
 * owner queue's rows the claim holds ($2, $3) take the owners' new pass, their place in the queue; a row another
 * claim holds is skipped, never waited for, and takes it from that claim's charge.
 */
export const CHARGE_OWNERS = prepared(
  'charge_owners',
  `WITH c AS (
    SELECT * FROM jsonb_to_recordset($1::jsonb) AS c(owner_id text, start float8, inc float8)
  ), s AS (
    INSERT INTO owner_shares AS s (owner_id, pass)
    SELECT owner_id, start + inc FROM c ORDER BY owner_id
    ON CONFLICT (owner_id) DO UPDATE
       SET pass = GREATEST(s.pass + (SELECT c.inc FROM c WHERE c.owner_id = s.owner_id), EXCLUDED.pass)
    RETURNING s.owner_id, s.max_concurrency, s.pass
  ), q AS (
    UPDATE owner_queue q SET pass = s.pass FROM s
     WHERE q.ctid IN (SELECT x.ctid FROM owner_queue x JOIN unnest($2::text[], $3::text[]) AS h(queue, owner_id)
                        ON x.queue = h.queue AND x.owner_id = h.owner_id FOR NO KEY UPDATE OF x SKIP LOCKED)
       AND s.owner_id = q.owner_id
  )
  SELECT owner_id, max_concurrency FROM s`,
);
/** Calls in flight per owner (as IN_FLIGHT_OF counts them), for Ledger.shareOut after the owners' row locks. */
export const IN_FLIGHT_BY_OWNER = prepared(
  'in_flight_by_owner',
  `SELECT o.owner_id, ${IN_FLIGHT_OF('o.owner_id')}::int AS in_flight FROM unnest($1::text[]) AS o(owner_id)`,
);

// The rest of the jobs table's statements, sent unnamed.

/** A list page's cursor: the job it names, if the owner's. */
export const JOB_CURSOR = statement<[id: string, ownerId: string]>(
  'job_cursor',
  `SELECT 1 FROM jobs WHERE id = $1 AND owner_id = $2`,
);

/** A page of the owner's jobs, newest first, keyset on (created_at, id); the filters are the call's. */
export const LIST_OWNED_JOBS = dynamic(
  'list_owned_jobs',
  (status: boolean, after: boolean) => {
    let where = 'j.owner_id = $1';
    if (status) where += ` AND j.status = $3`;
    if (after) {
      const n = status ? 4 : 3;
      where += ` AND (j.created_at, j.id) < (SELECT c.created_at, c.id FROM jobs c WHERE c.id = $${n})`;
    }
    return `SELECT ${listedJobColumns(JOB_COLUMNS)} FROM jobs j WHERE ${where}
        ORDER BY j.created_at DESC, j.id DESC LIMIT $2`;
  },
  true,
  true,
);

export const LIVE_JOBS_NAMING_OTHER_PROVIDERS = statement<[known: string[]]>(
  'live_jobs_naming_other_providers',
  `SELECT p AS provider, count(*)::int AS jobs FROM jobs j, unnest(j.providers) AS p
  WHERE j.status IN ('pending', 'running', 'unknown') AND NOT (p = ANY($1::text[])) GROUP BY p ORDER BY p`,
);

export const LOCK_OWNED_JOB = statement<[id: string, ownerId: string]>(
  'lock_owned_job',
  `SELECT ${JOB_COLUMNS} FROM jobs j WHERE j.id = $1 AND j.owner_id = $2 FOR UPDATE`,
);

export const LOCK_JOBS = statement<[ids: string[]]>(
  'lock_jobs',
  `SELECT ${JOB_COLUMNS} FROM jobs j WHERE j.id = ANY ($1::uuid[]) ORDER BY j.id FOR UPDATE`,
);

export const LOCK_BATCHES_OF_JOBS = statement<[jobIds: string[]]>(
  'lock_batches_of_jobs',
  `SELECT 1 FROM batches WHERE id IN (SELECT batch_id FROM batch_items WHERE job_id = ANY ($1::uuid[]))
  ORDER BY id FOR UPDATE`,
);

export const LOCK_JOB = statement<[id: string]>(
  'lock_job',
  `SELECT ${JOB_COLUMNS} FROM jobs j WHERE j.id = $1 FOR UPDATE`,
);

export const MARK_WAITING = statement<[ids: string[], provider: string]>(
  'mark_waiting',
  `UPDATE jobs SET waiting_for = $2 WHERE id = ANY($1::uuid[]) AND waiting_for IS DISTINCT FROM $2 RETURNING id`,
);

export const DEFER_ON = statement<[id: string, provider: string, delayMs: number]>(
  'defer_on',
  `UPDATE jobs SET status = 'pending', updated_at = now(), waiting_for = $2,
              next_attempt_at = now() + make_interval(secs => $3::float8 / 1000)
        WHERE id = $1`,
);

export const RELEASE_WAITS_OUTSIDE = statement<[known: string[]]>(
  'release_waits_outside',
  `UPDATE jobs SET waiting_for = NULL
  WHERE waiting_for IS NOT NULL AND NOT (waiting_for = ANY($1::text[])) RETURNING id`,
);

/** $3: keep the schedule; $4: the next attempt in ms, null to clear it. */
export const UPDATE_BOOKKEEPING = statement<
  [id: string, status: string, keepSchedule: boolean, nextAttemptInMs: number | null]
>(
  'update_job_bookkeeping',
  `UPDATE jobs SET status = $2, updated_at = now(),
              next_attempt_at = CASE WHEN $3::boolean THEN next_attempt_at
                                     WHEN $4::float8 IS NULL THEN NULL
                                     ELSE now() + make_interval(secs => $4::float8 / 1000) END,
              waiting_for = CASE WHEN $3::boolean THEN waiting_for ELSE NULL END
        WHERE id = $1`,
);
