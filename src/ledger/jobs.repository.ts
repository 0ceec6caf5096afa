import { Injectable } from '@nestjs/common';
import { DataSource } from 'typeorm';

import type { WaitingRoom } from '../capacity/capacity.rules.js';
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
      ...(budgeted && { ord, prompt_tokens: job.worstCaseTokens?.prompt ?? 0, completion_tokens: job.worstCaseTokens?.completion ?? 0 }),
      owner_id: job.ownerId,
      idempotency_key: job.idempotencyKey,
      fingerprint: job.fingerprint,
      operation: job.operation,
      providers: job.providers,
      trace_context: job.traceContext ?? null,
      waiting_for: job.waitingFor ?? null,
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
  j.result, j.error, j.completed_by, j.created_at, j.updated_at, j.completed_at, j.trace_context`;

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
    INSERT INTO jobs (owner_id, idempotency_key, fingerprint, operation, input, providers, trace_context, waiting_for)
    VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7, $8)
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
      input jsonb, providers text[], trace_context text, waiting_for text)
  ), j AS (
    INSERT INTO jobs (owner_id, idempotency_key, fingerprint, operation, input, providers, trace_context, waiting_for)
    SELECT owner_id, idempotency_key, fingerprint, operation, input, providers, trace_context, waiting_for FROM x
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
      operation text, input jsonb, providers text[], trace_context text, waiting_for text, prompt_tokens int, completion_tokens int)
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
                      reserved_cost, reserved_currency)
    SELECT owner_id, idempotency_key, fingerprint, operation, input, providers, trace_context, waiting_for, reserved_cost, $3
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

// A claim's first statement (the claim path's others are in attempts.repository.ts): due jobs, and those waiting
// for capacity up to each provider's room, locked with SKIP LOCKED.
const CLAIM_DUE = prepared(`WITH free AS (
         SELECT id, next_attempt_at FROM jobs
          WHERE next_attempt_at <= now() AND waiting_for IS NULL AND status IN ('pending', 'running', 'unknown')
          ORDER BY next_attempt_at LIMIT $1 FOR UPDATE SKIP LOCKED
       ), waiting AS (
         SELECT w.id, w.next_attempt_at FROM unnest($2::text[], $3::int[]) AS q(provider, room)
          CROSS JOIN LATERAL (
            SELECT id, next_attempt_at FROM jobs
             WHERE waiting_for = q.provider AND next_attempt_at <= now() AND status IN ('pending', 'running', 'unknown')
             ORDER BY next_attempt_at LIMIT q.room FOR UPDATE SKIP LOCKED
          ) w
       ), picked AS (
         SELECT id FROM (SELECT * FROM free UNION ALL SELECT * FROM waiting) x ORDER BY next_attempt_at LIMIT $1
       )
       SELECT ${JOB_COLUMNS}, ${ATTEMPTS_OF_J} FROM jobs j WHERE j.id IN (SELECT id FROM picked) ORDER BY j.next_attempt_at`);

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
      const rows = await rowsOf<JobRow>(
        on(this.dataSource, manager),
        INSERT_JOB,
        [job.ownerId, job.idempotencyKey, job.fingerprint, job.operation, JSON.stringify(job.input), job.providers, job.traceContext ?? null, job.waitingFor ?? null],
      );
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
  private async insertWithinBudget(ownerId: string, creates: Create[]): Promise<Array<Job | OverBudgetError | undefined>> {
    // Named statements in a transaction: a pooler's refusal runs it again, unnamed (inTransaction).
    return inTransaction(this.dataSource, async (manager) => {
      const [budget] = await rowsOf<{ monthly_limit: string; currency: string }>(manager, LOCK_BUDGET, [ownerId]);
      if (!budget) {
        const rows = await rowsOf<JobRow>(manager, INSERT_JOBS, [recordsOf(creates)]);
        const created = new Map(rows.map((row) => [row.idempotency_key, jobFromRow(row)]));
        return creates.map(({ job }) => created.get(job.idempotencyKey));
      }
      const rows = await rowsOf<JobRow & { ord: number; refused: boolean; used: string }>(manager, INSERT_JOBS_WITHIN_BUDGET, [
        recordsOf(creates, true),
        ownerId,
        budget.currency,
        budget.monthly_limit,
      ]);
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

  async findOwnedByKey(ownerId: string, idempotencyKey: string, manager?: Queryable): Promise<JobWithAttempts | undefined> {
    const rows = await rowsOf<JobWithAttemptsRow>(on(this.dataSource, manager), BY_KEY, [
      ownerId,
      idempotencyKey,
    ]);
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
      const cursor = await this.dataSource.query('SELECT 1 FROM jobs WHERE id = $1 AND owner_id = $2', [query.afterId, ownerId]);
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
    const rows = await rowsOf<JobRow>(manager, `SELECT ${JOB_COLUMNS} FROM jobs j WHERE j.id = $1 AND j.owner_id = $2 FOR UPDATE`, [id, ownerId]);
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
   * Up to `limit` jobs that need an attempt, with their attempts, locked for the caller's transaction. SKIP
   * LOCKED lets any number of workers claim side by side; a job is never handed to two of them. Jobs waiting for
   * capacity (docs/design.md#capacity) are read from their own index, at most `rooms[i]` for `providers[i]`: a
   * backlog on a capped provider costs a claim nothing while that provider has no room.
   */
  async claimDue(limit: number, waiting: WaitingRoom, manager: Queryable): Promise<JobWithAttempts[]> {
    const rows = await rowsOf<JobWithAttemptsRow>(
      manager,
      CLAIM_DUE,
      [limit, waiting.providers, waiting.rooms],
    );
    return rows.map(jobWithAttemptsFromRow);
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
  async updateBookkeeping(id: string, status: JobStatus, nextAttemptInMs: number | null | undefined, manager: Queryable): Promise<void> {
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
