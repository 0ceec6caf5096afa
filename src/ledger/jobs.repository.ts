import { Injectable } from '@nestjs/common';
import { DataSource } from 'typeorm';

import { GroupCommit } from '../database/group-commit.js';
import { uniqueViolationOf } from '../database/pg-errors.js';
import { prepared } from '../database/prepared-statements.js';
import { inTransaction, on, type Queryable, rowsOf } from '../database/transactions.js';
import {
  type Job,
  jobFromRow,
  type JobRow,
  type JobStatus,
  type JobWithAttempts,
  jobWithAttemptsFromRow,
  type JobWithAttemptsRow,
  LIST_RESULT_MAX_BYTES,
  type ListedJob,
  listedJobFromRow,
} from './job.types.js';
import { DuplicateIdempotencyKeyError, OverBudgetError } from './ledger.errors.js';

export interface NewJob {
  ownerId: string;
  idempotencyKey: string;
  fingerprint: string;
  operation: string;
  input: unknown;
  providers: string[];
  traceContext?: string | null;
  /** Higher first among the owner's own due jobs (docs/design.md#fair-share); 0 when omitted. */
  priority?: number;
  /** Born waiting for capacity on its primary provider when that one is capped (docs/design.md#capacity). */
  waitingFor?: string | null;
  /**
   * Set when the owner has a budget: the most tokens one attempt may bill (prompt and completion). The create is
   * then checked against the budget and reserves the worst case at the chain's dearest price, atomically.
   */
  worstCaseTokens?: { prompt: number; completion: number };
}

/** Creates one statement takes at most, statements in flight at once, and the input bytes one statement carries. */
const CREATE_BATCH = 64;
const CREATE_IN_FLIGHT = 4;
const CREATE_BATCH_BYTES = 1 << 20;

/** A create waiting for its statement, its input serialised once. */
interface Create {
  job: NewJob;
  inputJson: string;
}

const keyOf = (ownerId: string, idempotencyKey: string) => `${ownerId}\u0000${idempotencyKey}`;

/** One JSON array of records; each input goes in as serialised for its weight, not a second time. */
function recordsOf(creates: Create[], budgeted = false): string {
  const records = creates.map(({ job, inputJson }, ord) => {
    const fields = JSON.stringify({
      ...(budgeted && {
        ord,
        prompt_tokens: job.worstCaseTokens?.prompt ?? 0,
        completion_tokens: job.worstCaseTokens?.completion ?? 0,
      }),
      owner_id: job.ownerId,
      idempotency_key: job.idempotencyKey,
      fingerprint: job.fingerprint,
      operation: job.operation,
      providers: job.providers,
      trace_context: job.traceContext ?? null,
      waiting_for: job.waitingFor ?? null,
      priority: job.priority ?? 0,
    });
    return `${fields.slice(0, -1)},"input":${inputJson}}`;
  });
  return `[${records.join(',')}]`;
}

export interface JobPageQuery {
  status?: JobStatus;
  limit: number;
  /** The id of the last job of the previous page. */
  afterId?: string;
}

const JOB_COLUMNS = `j.id, j.owner_id, j.idempotency_key, j.fingerprint, j.operation, j.input, j.providers, j.status, j.version,
  j.result, j.error, j.completed_by, j.created_at, j.updated_at, j.completed_at, j.trace_context, j.priority`;

/**
 * JOB_COLUMNS for a list page: a long result stays in the database (PostgreSQL measures it; only the flag
 * travels), so a page of jobs holding large results stays small (issue 22 item 4).
 */
export function listedJobColumns(columns: string): string {
  const size = 'octet_length(j.result::text)';
  const listed = `CASE WHEN ${size} > ${LIST_RESULT_MAX_BYTES} THEN NULL ELSE j.result END AS result,
  COALESCE(${size} > ${LIST_RESULT_MAX_BYTES}, false) AS result_omitted`;
  return columns.replace(/\bj\.result\b/, listed);
}

const ATTEMPTS_OF_J = `COALESCE((SELECT json_agg(a ORDER BY a.number) FROM attempts a WHERE a.job_id = j.id), '[]'::json) AS attempts`;

const WITH_ATTEMPTS = `SELECT ${JOB_COLUMNS}, ${ATTEMPTS_OF_J} FROM jobs j`;

// The request path's statements: a create, a replay's read, a get (database/prepared-statements.ts). The bench's
// floor server (bench/floor.server.ts) runs INSERT_JOB and FIND_OWNED_BY_ID too.
export const INSERT_JOB = prepared(`WITH j AS (
    INSERT INTO jobs (owner_id, idempotency_key, fingerprint, operation, input, providers, trace_context, waiting_for, priority)
    VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7, $8, $9)
    RETURNING *
  ), e AS (
    INSERT INTO job_events (job_id, subject, from_status, to_status, reason)
    SELECT id, 'job', NULL, 'pending', 'created' FROM j
  )
  SELECT ${JOB_COLUMNS} FROM j`);
/**
 * The creates that arrive together, in one statement (JobsRepository.insertJob). A key that exists already is
 * skipped (its request replays or gets 409, as a unique violation would have answered), and only the constraint
 * of the owner and key is: any other error fails the statement. Rows go in in key order, so two statements that
 * share keys wait on each other in one order and never deadlock.
 */
const INSERT_JOBS = prepared(`WITH x AS (
    SELECT * FROM jsonb_to_recordset($1::jsonb) AS x(owner_id text, idempotency_key text, fingerprint text, operation text,
      input jsonb, providers text[], trace_context text, waiting_for text, priority smallint)
  ), j AS (
    INSERT INTO jobs (owner_id, idempotency_key, fingerprint, operation, input, providers, trace_context, waiting_for, priority)
    SELECT owner_id, idempotency_key, fingerprint, operation, input, providers, trace_context, waiting_for, priority FROM x
     ORDER BY owner_id, idempotency_key
    ON CONFLICT ON CONSTRAINT "UQ_jobs_owner_idempotency_key" DO NOTHING
    RETURNING *
  ), e AS (
    INSERT INTO job_events (job_id, subject, from_status, to_status, reason)
    SELECT id, 'job', NULL, 'pending', 'created' FROM j
  )
  SELECT ${JOB_COLUMNS} FROM j`);
/**
 * A budgeted owner's creates, run right after LOCK_BUDGET in one transaction, so the sum it reads includes every
 * job the previous holder of the lock committed. Each create reserves its worst case (its tokens at the dearest
 * price, in the budget's currency, of provider_prices for its chain, the table the attempts' pricing trigger reads)
 * and is admitted while what is spent this month plus what live jobs still hold plus the creates ahead of it in
 * this statement is below the limit: no burst passes the budget by more than one job's worst case. A key that
 * exists already is not counted and comes back as a collision (replay or 409), as in INSERT_JOBS.
 */
const INSERT_JOBS_WITHIN_BUDGET = prepared(`WITH x AS (
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
    SELECT (SELECT COALESCE(sum(a.cost), 0) FROM jobs j JOIN attempts a ON a.job_id = j.id
             WHERE j.owner_id = $2 AND a.cost_currency = $3 AND a.started_at >= date_trunc('month', now(), 'UTC'))
         + (SELECT COALESCE(sum(GREATEST(j.reserved_cost
                    - COALESCE((SELECT sum(a.cost) FROM attempts a WHERE a.job_id = j.id AND a.cost_currency = $3), 0), 0)), 0)
              FROM jobs j WHERE j.owner_id = $2 AND j.status IN ('pending', 'running', 'unknown') AND j.reserved_currency = $3)
           AS amount
  ), admitted AS (
    SELECT f.* FROM (SELECT f.*, sum(f.reserved_cost) OVER (ORDER BY f.ord) - f.reserved_cost AS ahead FROM fresh f) f, used
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
   ORDER BY x.ord`);
/** The per-owner serialisation of budgeted creates: every replica's creates for one owner queue on this row. */
const LOCK_BUDGET = prepared(`SELECT monthly_limit, currency FROM owner_budgets WHERE owner_id = $1 FOR UPDATE`);
export const FIND_OWNED_BY_ID = prepared(`${WITH_ATTEMPTS} WHERE j.id = $1 AND j.owner_id = $2`);
const BY_KEY = prepared(`${WITH_ATTEMPTS} WHERE j.owner_id = $1 AND j.idempotency_key = $2`);
const STATUSES = prepared('SELECT id, status FROM jobs WHERE id = ANY($1::uuid[])');

/**
 * How far behind the furthest owner present an owner's pass may lag, in slots per unit of weight: the credit an
 * owner back from idle (or new) may spend before the others' turns, and the slack that absorbs the jobs two
 * replicas' concurrent claims give one owner from the same snapshot (docs/design.md#fair-share).
 */
const FAIR_CREDIT = 4;

/** A due job (the index predicates of IDX_jobs_due_owner and IDX_jobs_waiting_owner, and the due time). */
const DUE = `next_attempt_at IS NOT NULL AND next_attempt_at <= now() AND status IN ('pending', 'running', 'unknown')`;

/**
 * A claim's first statement (the claim path's others are in attempts.repository.ts), fair between owners
 * (docs/design.md#fair-share). The slots are sets: the worker's window for free jobs ($1), and each capped
 * provider's room now for the jobs waiting on it ($2, $3). Per set:
 * 1. the owners with due work, by a loose index scan (one index probe per owner, none per job);
 * 2. of those, the room's count by first tag; per owner, its highest priority then oldest due jobs, locked with
 *    SKIP LOCKED, at most its quota: its weighted share of the room plus one, within its cap's headroom
 *    (approximate here, from this snapshot; exact in Ledger.shareOut);
 * 3. stride scheduling: the n-th job of an owner gets the tag start + n / weight, where start is the owner's pass
 *    (slots served per unit of weight, owner_shares) raised to within FAIR_CREDIT of the furthest owner present,
 *    so an owner back from idle (or new) has little credit to spend; ties go by a coin per owner and claim, so
 *    concurrent claims from one snapshot spread over the tied owners;
 * 4. the smallest tags fill each set's room, then the worker's window across sets, in tag order.
 * `more` is true when an owner's quota, not the room, stopped its share: more is due than one claim took.
 */
export const CLAIM_DUE = prepared(`WITH RECURSIVE free_owners AS (
         SELECT (SELECT min(owner_id) FROM jobs WHERE waiting_for IS NULL AND ${DUE}) AS owner_id
         UNION ALL
         SELECT (SELECT min(j.owner_id) FROM jobs j
                  WHERE j.waiting_for IS NULL AND j.owner_id > f.owner_id AND ${DUE})
           FROM free_owners f WHERE f.owner_id IS NOT NULL
       ), waiting_owners AS (
         SELECT q.provider, q.room,
                (SELECT min(owner_id) FROM jobs WHERE waiting_for = q.provider AND ${DUE}) AS owner_id
           FROM unnest($2::text[], $3::int[]) AS q(provider, room) WHERE q.room > 0
         UNION ALL
         SELECT w.provider, w.room,
                (SELECT min(j.owner_id) FROM jobs j
                  WHERE j.waiting_for = w.provider AND j.owner_id > w.owner_id AND ${DUE})
           FROM waiting_owners w WHERE w.owner_id IS NOT NULL
       ), demand AS (
         SELECT NULL::text AS provider, $1::int AS room, owner_id FROM free_owners WHERE owner_id IS NOT NULL
         UNION ALL
         SELECT provider, room, owner_id FROM waiting_owners WHERE owner_id IS NOT NULL
       ), owners AS MATERIALIZED (
         SELECT o.owner_id, o.weight, o.headroom, o.capped,
                GREATEST(o.pass, max(o.pass) OVER () - ${FAIR_CREDIT}) AS start,
                count(*) OVER () AS present, random() AS coin
           FROM (SELECT d.owner_id, COALESCE(s.weight, 1)::float8 AS weight, COALESCE(s.pass, 0) AS pass,
                        s.max_concurrency IS NOT NULL AS capped,
                        CASE WHEN s.max_concurrency IS NULL THEN $1::int
                             ELSE LEAST($1::int, GREATEST(0, s.max_concurrency - (
                                    SELECT count(*) FROM jobs r WHERE r.owner_id = d.owner_id AND r.status = 'running')))::int
                        END AS headroom
                   FROM (SELECT DISTINCT owner_id FROM demand) d LEFT JOIN owner_shares s ON s.owner_id = d.owner_id) o
       ), quotas AS MATERIALIZED (
         SELECT r.*, LEAST(r.room, r.headroom,
                           ceil(r.room * r.weight / sum(r.weight) OVER (PARTITION BY r.provider))::int + 1) AS quota,
                LEAST(r.room, r.headroom) AS bound, count(*) OVER (PARTITION BY r.provider) < r.owners AS cut
           FROM (SELECT d.provider, d.room, d.owner_id, o.start, o.weight, o.capped, o.headroom, o.coin,
                        row_number() OVER (PARTITION BY d.provider ORDER BY o.start + 1 / o.weight, o.coin) AS place,
                        count(*) OVER (PARTITION BY d.provider) AS owners
                   FROM demand d JOIN owners o ON o.owner_id = d.owner_id WHERE o.headroom > 0) r
          WHERE r.place <= r.room
       ), candidates AS (
         SELECT q.provider, q.room, q.owner_id, q.start, q.weight, q.coin, q.quota, q.bound,
                c.id, c.priority, c.next_attempt_at
           FROM quotas q CROSS JOIN LATERAL (
             SELECT id, priority, next_attempt_at FROM jobs
              WHERE owner_id = q.owner_id AND waiting_for IS NULL AND ${DUE}
              ORDER BY priority DESC, next_attempt_at LIMIT q.quota FOR UPDATE SKIP LOCKED
           ) c WHERE q.provider IS NULL
         UNION ALL
         SELECT q.provider, q.room, q.owner_id, q.start, q.weight, q.coin, q.quota, q.bound,
                c.id, c.priority, c.next_attempt_at
           FROM quotas q CROSS JOIN LATERAL (
             SELECT id, priority, next_attempt_at FROM jobs
              WHERE waiting_for = q.provider AND owner_id = q.owner_id AND ${DUE}
              ORDER BY priority DESC, next_attempt_at LIMIT q.quota FOR UPDATE SKIP LOCKED
           ) c WHERE q.provider IS NOT NULL
       ), in_sets AS (
         SELECT x.* FROM (
           SELECT c.*, row_number() OVER (PARTITION BY c.provider ORDER BY c.start + c.turn / c.weight, c.coin, c.turn) AS slot
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
                         HAVING count(*) >= c.quota) AS more
       )
       SELECT ${JOB_COLUMNS}, ${ATTEMPTS_OF_J}, p.start, p.weight, o.capped,
              (SELECT present FROM owners LIMIT 1)::int AS owners_present, (SELECT more FROM more) AS more
         FROM picked p JOIN jobs j ON j.id = p.id JOIN owners o ON o.owner_id = p.owner_id
        ORDER BY p.tag, p.coin`);

/**
 * A claim's charges (JobsRepository.chargeOwners): `inc` is the jobs it took over the owner's weight. Upserted in
 * owner order, so two claims charging the same owners wait on each other in one order and never deadlock.
 */
const CHARGE_OWNERS = prepared(`WITH c AS (
    SELECT * FROM jsonb_to_recordset($1::jsonb) AS c(owner_id text, start float8, inc float8)
  )
  INSERT INTO owner_shares AS s (owner_id, pass)
  SELECT owner_id, start + inc FROM c ORDER BY owner_id
  ON CONFLICT (owner_id) DO UPDATE
     SET pass = GREATEST(s.pass + (SELECT c.inc FROM c WHERE c.owner_id = s.owner_id), EXCLUDED.pass)
  RETURNING s.owner_id, s.max_concurrency`);
const RUNNING_BY_OWNER = prepared(`SELECT owner_id, count(*)::int AS running FROM jobs
  WHERE owner_id = ANY($1::text[]) AND status = 'running' GROUP BY owner_id`);

/** What CLAIM_DUE adds to each claimed job's row. */
interface ClaimShareRow {
  start: number;
  weight: number;
  capped: boolean;
  owners_present: number;
  more: boolean;
}

/** One owner's part of a claim: where its turns started (its pass, raised to the others'), its weight, its jobs. */
export interface OwnerShare {
  ownerId: string;
  start: number;
  weight: number;
  /** The owner has a maxConcurrency: its jobs are checked against it under its row lock (chargeOwners). */
  capped: boolean;
  jobs: number;
}

export interface OwnerCharge {
  owner_id: string;
  start: number;
  inc: number;
}

/**
 * How many jobs waiting for capacity a claim may take per provider (docs/design.md#capacity): the claim's second
 * argument, filled in by ProviderCapacity.rooms.
 */
export interface WaitingRoom {
  providers: string[];
  rooms: number[];
}

export interface FairClaim {
  /** In turn order: owner by owner, each owner's highest priority then oldest first. */
  jobs: JobWithAttempts[];
  /** An owner's share, not the room, ended the claim: claim again before sleeping. */
  more: boolean;
  /** Owners with due work for the claim's slots (the charges are skipped when only one had any). */
  ownersPresent: number;
  shares: OwnerShare[];
}

/** The jobs table. Reads take the owner (I7); writes are reached only through the Ledger. */
@Injectable()
export class JobsRepository {
  /** Group commit for creates (database/group-commit.ts): one statement, one commit, for the creates of a moment. */
  private readonly creates = new GroupCommit<Create, Job | undefined>({
    maxBatch: CREATE_BATCH,
    maxInFlight: CREATE_IN_FLIGHT,
    keyOf: (create) => keyOf(create.job.ownerId, create.job.idempotencyKey),
    weightOf: (create) => create.inputJson.length,
    maxWeight: CREATE_BATCH_BYTES,
    commit: (creates) => this.insertBatch(creates),
  });

  /**
   * Budgeted creates, one group commit per owner with a budget and one statement at a time: they serialise on
   * the owner's budget row anyway, so a second statement in flight would only hold a pool connection waiting.
   */
  private readonly budgeted = new Map<string, GroupCommit<Create, Job | OverBudgetError | undefined>>();

  constructor(private readonly dataSource: DataSource) {}

  /**
   * A plain INSERT (with its `created` event in the same statement), committed before it returns. A second request
   * with the same owner and key finds UQ_jobs_owner_idempotency_key taken and surfaces as
   * DuplicateIdempotencyKeyError: no check first. Outside a transaction, the creates that arrive together share
   * one statement and one commit (INSERT_JOBS), each answered as if alone.
   */
  async insertJob(job: NewJob, manager?: Queryable): Promise<Job> {
    if (!manager) {
      const create = { job, inputJson: JSON.stringify(job.input) };
      const created = await (job.worstCaseTokens ? this.budgetedCreates(job.ownerId) : this.creates).submit(create);
      if (created instanceof OverBudgetError) throw created;
      if (!created) throw new DuplicateIdempotencyKeyError(job.ownerId, job.idempotencyKey, job.fingerprint);
      return created;
    }
    try {
      const rows = await rowsOf<JobRow>(on(this.dataSource, manager), INSERT_JOB, [
        job.ownerId,
        job.idempotencyKey,
        job.fingerprint,
        job.operation,
        JSON.stringify(job.input),
        job.providers,
        job.traceContext ?? null,
        job.waitingFor ?? null,
        job.priority ?? 0,
      ]);
      return jobFromRow(rows[0]);
    } catch (error) {
      if (uniqueViolationOf(error) === 'UQ_jobs_owner_idempotency_key') {
        throw new DuplicateIdempotencyKeyError(job.ownerId, job.idempotencyKey, job.fingerprint);
      }
      throw error;
    }
  }

  private async insertBatch(creates: Create[]): Promise<Array<Job | undefined>> {
    const rows = await rowsOf<JobRow>(this.dataSource.manager, INSERT_JOBS, [recordsOf(creates)]);
    const created = new Map(rows.map((row) => [keyOf(row.owner_id, row.idempotency_key), jobFromRow(row)]));
    return creates.map(({ job }) => created.get(keyOf(job.ownerId, job.idempotencyKey)));
  }

  private budgetedCreates(ownerId: string): GroupCommit<Create, Job | OverBudgetError | undefined> {
    let group = this.budgeted.get(ownerId);
    if (!group) {
      group = new GroupCommit({
        maxBatch: CREATE_BATCH,
        maxInFlight: 1,
        keyOf: (create) => create.job.idempotencyKey,
        weightOf: (create) => create.inputJson.length,
        maxWeight: CREATE_BATCH_BYTES,
        commit: (creates) => this.insertWithinBudget(ownerId, creates),
      });
      this.budgeted.set(ownerId, group);
    }
    return group;
  }

  /**
   * The check and the reservation in the create's transaction: LOCK_BUDGET, then INSERT_JOBS_WITHIN_BUDGET on a
   * snapshot taken after the lock. The transaction is the group commit's, as the statement of INSERT_JOBS is.
   * A budget removed since the cache read lets the creates through unchecked (INSERT_JOBS).
   */
  private async insertWithinBudget(
    ownerId: string,
    creates: Create[],
  ): Promise<Array<Job | OverBudgetError | undefined>> {
    // Named statements in a transaction: a pooler's refusal runs it again, unnamed (inTransaction).
    return inTransaction(this.dataSource, async (manager) => {
      const [budget] = await rowsOf<{ monthly_limit: string; currency: string }>(manager, LOCK_BUDGET, [ownerId]);
      if (!budget) {
        const rows = await rowsOf<JobRow>(manager, INSERT_JOBS, [recordsOf(creates)]);
        const created = new Map(rows.map((row) => [row.idempotency_key, jobFromRow(row)]));
        return creates.map(({ job }) => created.get(job.idempotencyKey));
      }
      const rows = await rowsOf<JobRow & { ord: number; refused: boolean; used: string }>(
        manager,
        INSERT_JOBS_WITHIN_BUDGET,
        [recordsOf(creates, true), ownerId, budget.currency, budget.monthly_limit],
      );
      return rows.map((row) => {
        if (row.refused) return new OverBudgetError(Number(budget.monthly_limit), budget.currency, Number(row.used));
        return row.id ? jobFromRow(row) : undefined;
      });
    });
  }

  async findOwnedById(ownerId: string, id: string, manager?: Queryable): Promise<JobWithAttempts | undefined> {
    const rows = await rowsOf<JobWithAttemptsRow>(on(this.dataSource, manager), FIND_OWNED_BY_ID, [id, ownerId]);
    return rows[0] && jobWithAttemptsFromRow(rows[0]);
  }

  async findOwnedByKey(
    ownerId: string,
    idempotencyKey: string,
    manager?: Queryable,
  ): Promise<JobWithAttempts | undefined> {
    const rows = await rowsOf<JobWithAttemptsRow>(on(this.dataSource, manager), BY_KEY, [ownerId, idempotencyKey]);
    return rows[0] && jobWithAttemptsFromRow(rows[0]);
  }

  /** Terminal statuses of the given jobs, for `Prefer: wait` waiters (one query for every waiter woken at once). */
  async statusesOf(ids: string[]): Promise<Map<string, JobStatus>> {
    const rows = await rowsOf<{ id: string; status: JobStatus }>(this.dataSource.manager, STATUSES, [ids]);
    return new Map(rows.map((r) => [r.id, r.status]));
  }

  /** Newest first, keyset on (created_at, id). Returns undefined when the cursor names no job of the owner. */
  async listOwned(ownerId: string, query: JobPageQuery): Promise<ListedJob[] | undefined> {
    const params: unknown[] = [ownerId, query.limit];
    let where = 'j.owner_id = $1';
    if (query.status) {
      params.push(query.status);
      where += ` AND j.status = $${params.length}`;
    }
    if (query.afterId) {
      params.push(query.afterId);
      const cursor = await this.dataSource.query('SELECT 1 FROM jobs WHERE id = $1 AND owner_id = $2', [
        query.afterId,
        ownerId,
      ]);
      if (!cursor.length) return undefined;
      where += ` AND (j.created_at, j.id) < (SELECT c.created_at, c.id FROM jobs c WHERE c.id = $${params.length})`;
    }
    const rows = await rowsOf<JobRow>(
      this.dataSource.manager,
      `SELECT ${listedJobColumns(JOB_COLUMNS)} FROM jobs j WHERE ${where}
        ORDER BY j.created_at DESC, j.id DESC LIMIT $2`,
      params,
    );
    return rows.map(listedJobFromRow);
  }

  /** Job ids of live jobs whose chain names a provider outside `known`: they need an operator's eye at start-up. */
  async liveJobsNamingOtherProviders(known: string[]): Promise<Array<{ provider: string; jobs: number }>> {
    return rowsOf<{ provider: string; jobs: number }>(
      this.dataSource.manager,
      `SELECT p AS provider, count(*)::int AS jobs FROM jobs j, unnest(j.providers) AS p
        WHERE j.status IN ('pending', 'running', 'unknown') AND NOT (p = ANY($1::text[])) GROUP BY p ORDER BY p`,
      [known],
    );
  }

  async lockOwned(ownerId: string, id: string, manager: Queryable): Promise<Job | undefined> {
    const rows = await rowsOf<JobRow>(
      manager,
      `SELECT ${JOB_COLUMNS} FROM jobs j WHERE j.id = $1 AND j.owner_id = $2 FOR UPDATE`,
      [id, ownerId],
    );
    return rows[0] && jobFromRow(rows[0]);
  }

  /** Jobs locked in id order (the order every multi-job writer takes them in), for a batch's cancel. */
  async lockManyById(ids: string[], manager: Queryable): Promise<Job[]> {
    const rows = await rowsOf<JobRow>(
      manager,
      `SELECT ${JOB_COLUMNS} FROM jobs j WHERE j.id = ANY ($1::uuid[]) ORDER BY j.id FOR UPDATE`,
      [ids],
    );
    return rows.map(jobFromRow);
  }

  /**
   * The batches these jobs belong to, locked in id order, after the jobs: a transaction that ends several jobs
   * (a batch's cancel) takes every batch row its statements' trigger will take up front, so two such transactions
   * on batches sharing jobs queue instead of deadlocking (migration CreateBatches, docs/design.md#batches).
   */
  async lockBatchesOf(jobIds: string[], manager: Queryable): Promise<void> {
    await manager.query(
      `SELECT 1 FROM batches WHERE id IN (SELECT batch_id FROM batch_items WHERE job_id = ANY ($1::uuid[]))
        ORDER BY id FOR UPDATE`,
      [jobIds],
    );
  }

  async lockById(id: string, manager: Queryable): Promise<Job | undefined> {
    const rows = await rowsOf<JobRow>(manager, `SELECT ${JOB_COLUMNS} FROM jobs j WHERE j.id = $1 FOR UPDATE`, [id]);
    return rows[0] && jobFromRow(rows[0]);
  }

  /**
   * Up to `limit` jobs that need an attempt, with their attempts, locked for the caller's transaction, taken owner
   * by owner in turn (CLAIM_DUE, docs/design.md#fair-share). SKIP LOCKED lets any number of workers claim side by
   * side; a job is never handed to two of them. Jobs waiting for capacity (docs/design.md#capacity) are read from
   * their own index, at most `rooms[i]` for `providers[i]`: a backlog on a capped provider costs a claim nothing
   * while that provider has no room.
   */
  async claimDue(limit: number, waiting: WaitingRoom, manager: Queryable): Promise<FairClaim> {
    const rows = await rowsOf<JobWithAttemptsRow & ClaimShareRow>(manager, CLAIM_DUE, [
      limit,
      waiting.providers,
      waiting.rooms,
    ]);
    const shares = new Map<string, OwnerShare>();
    for (const row of rows) {
      const share = shares.get(row.owner_id) ?? {
        ownerId: row.owner_id,
        start: row.start,
        weight: row.weight,
        capped: row.capped,
        jobs: 0,
      };
      share.jobs++;
      shares.set(row.owner_id, share);
    }
    return {
      jobs: rows.map(jobWithAttemptsFromRow),
      more: rows[0]?.more === true,
      ownersPresent: rows[0]?.owners_present ?? 0,
      shares: [...shares.values()],
    };
  }

  /**
   * The owners a claim served, their passes advanced by what it took (start + jobs / weight, or further if another
   * claim advanced them meanwhile), and the rows of capped owners locked, in owner order (after the job locks,
   * before the providers': the lock order). Returns the caps of the capped ones, read under their lock.
   */
  async chargeOwners(charges: OwnerCharge[], manager: Queryable): Promise<Map<string, number>> {
    if (!charges.length) return new Map();
    const rows = await rowsOf<{ owner_id: string; max_concurrency: number | null }>(manager, CHARGE_OWNERS, [
      JSON.stringify(charges),
    ]);
    return new Map(rows.filter((r) => r.max_concurrency !== null).map((r) => [r.owner_id, r.max_concurrency!]));
  }

  /** Jobs `running` (an attempt starting or running) per owner: a capped owner's calls in flight, read after its lock. */
  async runningByOwner(ownerIds: string[], manager: Queryable): Promise<Map<string, number>> {
    if (!ownerIds.length) return new Map();
    const rows = await rowsOf<{ owner_id: string; running: number }>(manager, RUNNING_BY_OWNER, [ownerIds]);
    return new Map(rows.map((r) => [r.owner_id, r.running]));
  }

  /**
   * Due jobs, locked by the caller, that must wait for capacity on `provider`: they keep their place in the queue
   * and claims take them only as the provider has room. Returns the ids that were not waiting on it already.
   */
  async markWaiting(ids: string[], provider: string, manager: Queryable): Promise<string[]> {
    const rows = await rowsOf<{ id: string }>(
      manager,
      `UPDATE jobs SET waiting_for = $2 WHERE id = ANY($1::uuid[]) AND waiting_for IS DISTINCT FROM $2 RETURNING id`,
      [ids, provider],
    );
    return rows.map((r) => r.id);
  }

  /**
   * A job that waits, with no attempt, for a provider's pause or cooldown to end: `pending`, waiting on the provider,
   * due at that end. Under the caller's row lock. The end is a bound, not a promise: when the provider opens
   * earlier, CapacityRepository.wakeDeferred makes it due at once.
   */
  async deferOn(id: string, provider: string, delayMs: number, manager: Queryable): Promise<void> {
    await manager.query(
      `UPDATE jobs SET status = 'pending', updated_at = now(), waiting_for = $2,
              next_attempt_at = now() + make_interval(secs => $3::float8 / 1000)
        WHERE id = $1`,
      [id, provider, Math.max(0, delayMs)],
    );
  }

  /** Jobs waiting on providers this catalog does not name (a catalog change) are planned afresh. */
  async releaseWaitsOutside(known: string[], manager: Queryable): Promise<number> {
    const rows = await rowsOf<{ id: string }>(
      manager,
      `UPDATE jobs SET waiting_for = NULL WHERE waiting_for IS NOT NULL AND NOT (waiting_for = ANY($1::text[])) RETURNING id`,
      [known],
    );
    return rows.length;
  }

  /** Bookkeeping under the caller's row lock: never touches version. `nextAttemptInMs` null clears the schedule. */
  async updateBookkeeping(
    id: string,
    status: JobStatus,
    nextAttemptInMs: number | null | undefined,
    manager: Queryable,
  ): Promise<void> {
    // A new schedule ends any wait for capacity: the job is planned afresh when it is due.
    await manager.query(
      `UPDATE jobs SET status = $2, updated_at = now(),
              next_attempt_at = CASE WHEN $3::boolean THEN next_attempt_at
                                     WHEN $4::float8 IS NULL THEN NULL
                                     ELSE now() + make_interval(secs => $4::float8 / 1000) END,
              waiting_for = CASE WHEN $3::boolean THEN waiting_for ELSE NULL END
        WHERE id = $1`,
      [id, status, nextAttemptInMs === undefined, nextAttemptInMs ?? null],
    );
  }
}
