import { Injectable } from '@nestjs/common';
import { DataSource } from 'typeorm';

import { GroupCommit } from '../database/group-commit.js';
import { uniqueViolationOf } from '../database/pg-errors.js';
import { inTransaction, on, type Queryable, rowsOf, run } from '../database/transactions.js';
import {
  type Job,
  jobFromRow,
  type JobRow,
  type JobStatus,
  type JobWithAttempts,
  jobWithAttemptsFromRow,
  type JobWithAttemptsRow,
  type ListedJob,
  listedJobFromRow,
} from './job.types.js';
import {
  CHARGE_OWNERS,
  CLAIM_DUE,
  CLAIM_SOLE,
  DEFER_ON,
  FIND_OWNED_BY_ID,
  FIND_OWNED_BY_KEY,
  IN_FLIGHT_BY_OWNER,
  INSERT_JOB,
  INSERT_JOBS,
  INSERT_JOBS_WITHIN_BUDGET,
  JOB_CURSOR,
  JOB_STATUSES,
  LIST_OWNED_JOBS,
  LIVE_JOBS_NAMING_OTHER_PROVIDERS,
  LOCK_BATCHES_OF_JOBS,
  LOCK_BUDGET,
  LOCK_JOB,
  LOCK_JOBS,
  LOCK_OWNED_JOB,
  MARK_WAITING,
  ownersPerSet,
  RELEASE_WAITS_OUTSIDE,
  TIDY_OWNER_QUEUE,
  UPDATE_BOOKKEEPING,
} from './jobs.sql.js';
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

/** What CLAIM_DUE adds to each claimed job's row (and to its one row when it picked nothing). */
interface ClaimShareRow {
  start: number;
  weight: number;
  capped: boolean;
  owners_present: number;
  more: boolean;
  tidy_queues: string[] | null;
  tidy_owners: string[] | null;
  held_queues: string[] | null;
  held_owners: string[] | null;
}

/** Rows of the owner queue, by queue ('' for free jobs, else a provider) and owner: two arrays of one length. */
export interface QueueRows {
  queues: string[];
  owners: string[];
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
  /** CLAIM_SOLE took it (one owner alone had due work), not CLAIM_DUE. */
  sole: boolean;
  /** The owner queue's rows this claim holds (their pass follows the charges: chargeOwners). */
  held: QueueRows;
  /** The rows it held whose owner had fewer due jobs than it asked for: tidyOwnerQueue, after the commit. */
  tidy: QueueRows;
}

const NO_ROWS: QueueRows = { queues: [], owners: [] };

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
    // ON CONFLICT DO NOTHING: a second run after a lost answer finds the jobs the first committed, as replays.
    idempotent: true,
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
        idempotent: true,
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
    const rows = await rowsOf<JobWithAttemptsRow>(on(this.dataSource, manager), FIND_OWNED_BY_KEY, [
      ownerId,
      idempotencyKey,
    ]);
    return rows[0] && jobWithAttemptsFromRow(rows[0]);
  }

  /** Terminal statuses of the given jobs, for `Prefer: wait` waiters (one query for every waiter woken at once). */
  async statusesOf(ids: string[]): Promise<Map<string, JobStatus>> {
    const rows = await rowsOf<{ id: string; status: JobStatus }>(this.dataSource.manager, JOB_STATUSES, [ids]);
    return new Map(rows.map((r) => [r.id, r.status]));
  }

  /** Newest first, keyset on (created_at, id). Returns undefined when the cursor names no job of the owner. */
  async listOwned(ownerId: string, query: JobPageQuery): Promise<ListedJob[] | undefined> {
    const params: unknown[] = [ownerId, query.limit];
    if (query.status) params.push(query.status);
    if (query.afterId) {
      params.push(query.afterId);
      const cursor = await rowsOf(this.dataSource.manager, JOB_CURSOR, [query.afterId, ownerId]);
      if (!cursor.length) return undefined;
    }
    const sql = LIST_OWNED_JOBS.build(query.status !== undefined, query.afterId !== undefined);
    const rows = await rowsOf<JobRow>(this.dataSource.manager, sql, params);
    return rows.map(listedJobFromRow);
  }

  /** Job ids of live jobs whose chain names a provider outside `known`: they need an operator's eye at start-up. */
  async liveJobsNamingOtherProviders(known: string[]): Promise<Array<{ provider: string; jobs: number }>> {
    return rowsOf<{ provider: string; jobs: number }>(this.dataSource.manager, LIVE_JOBS_NAMING_OTHER_PROVIDERS, [
      known,
    ]);
  }

  async lockOwned(ownerId: string, id: string, manager: Queryable): Promise<Job | undefined> {
    const rows = await rowsOf<JobRow>(manager, LOCK_OWNED_JOB, [id, ownerId]);
    return rows[0] && jobFromRow(rows[0]);
  }

  /** Jobs locked in id order (the order every multi-job writer takes them in), for a batch's cancel. */
  async lockManyById(ids: string[], manager: Queryable): Promise<Job[]> {
    const rows = await rowsOf<JobRow>(manager, LOCK_JOBS, [ids]);
    return rows.map(jobFromRow);
  }

  /**
   * The batches these jobs belong to, locked in id order, after the jobs: a transaction that ends several jobs
   * (a batch's cancel) takes every batch row its statements' trigger will take up front, so two such transactions
   * on batches sharing jobs queue instead of deadlocking (migration CreateBatches, docs/design.md#batches).
   */
  async lockBatchesOf(jobIds: string[], manager: Queryable): Promise<void> {
    await run(manager, LOCK_BATCHES_OF_JOBS, [jobIds]);
  }

  async lockById(id: string, manager: Queryable): Promise<Job | undefined> {
    const rows = await rowsOf<JobRow>(manager, LOCK_JOB, [id]);
    return rows[0] && jobFromRow(rows[0]);
  }

  /**
   * Up to `limit` jobs that need an attempt, with their attempts, locked for the caller's transaction, taken owner
   * by owner in turn (CLAIM_DUE, docs/design.md#fair-share). SKIP LOCKED lets any number of workers claim side by
   * side; a job is never handed to two of them. Jobs waiting for capacity (docs/design.md#capacity) are read from
   * their own index, at most `rooms[i]` for `providers[i]`: a backlog on a capped provider costs a claim nothing
   * while that provider has no room. With `sole` (the last claim saw one owner), CLAIM_SOLE first, and CLAIM_DUE
   * only when it finds another owner (or a cap) to be fair to.
   */
  async claimDue(limit: number, waiting: WaitingRoom, manager: Queryable, sole = false): Promise<FairClaim> {
    const params = [limit, waiting.providers, waiting.rooms];
    if (sole) {
      const found = await rowsOf<JobWithAttemptsRow & { fair: boolean }>(manager, CLAIM_SOLE, params);
      if (!found[0]?.fair) {
        const jobs = found.filter((row) => row.id !== null).map(jobWithAttemptsFromRow);
        const ownerId = jobs[0]?.ownerId;
        return {
          jobs,
          more: false,
          ownersPresent: ownerId === undefined ? 0 : 1,
          shares: ownerId === undefined ? [] : [{ ownerId, start: 0, weight: 1, capped: false, jobs: jobs.length }],
          sole: true,
          held: NO_ROWS,
          tidy: NO_ROWS,
        };
      }
    }
    const all = await rowsOf<JobWithAttemptsRow & ClaimShareRow>(manager, CLAIM_DUE, [...params, ownersPerSet(limit)]);
    const rows = all.filter((row) => row.id !== null);
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
      ownersPresent: all[0]?.owners_present ?? 0,
      shares: [...shares.values()],
      sole: false,
      held: { queues: all[0]?.held_queues ?? [], owners: all[0]?.held_owners ?? [] },
      tidy: { queues: all[0]?.tidy_queues ?? [], owners: all[0]?.tidy_owners ?? [] },
    };
  }

  /**
   * The owner queue's rows a committed claim found empty, recomputed (TIDY_OWNER_QUEUE): removed when their owner
   * has nothing due there, a `later` row kept at its next due time. Outside any transaction of the caller's.
   */
  async tidyOwnerQueue(rows: QueueRows, manager: Queryable): Promise<number> {
    if (!rows.owners.length) return 0;
    const [row] = await rowsOf<{ tidied: number }>(manager, TIDY_OWNER_QUEUE, [rows.queues, rows.owners]);
    return row?.tidied ?? 0;
  }

  /**
   * The owners a claim served, their passes advanced by what it took (start + jobs / weight, or further if another
   * claim advanced them meanwhile), and the rows of capped owners locked, in owner order (after the job locks,
   * before the providers': the lock order). Returns the caps of the capped ones, read under their lock.
   */
  async chargeOwners(
    charges: OwnerCharge[],
    manager: Queryable,
    held: QueueRows = NO_ROWS,
  ): Promise<Map<string, number>> {
    if (!charges.length) return new Map();
    const rows = await rowsOf<{ owner_id: string; max_concurrency: number | null }>(manager, CHARGE_OWNERS, [
      JSON.stringify(charges),
      held.queues,
      held.owners,
    ]);
    return new Map(rows.filter((r) => r.max_concurrency !== null).map((r) => [r.owner_id, r.max_concurrency!]));
  }

  /**
   * A capped owner's calls in flight (IN_FLIGHT_BY_OWNER: live attempts until their hard deadline, not jobs
   * `running`), read after its row lock.
   */
  async inFlightByOwner(ownerIds: string[], manager: Queryable): Promise<Map<string, number>> {
    if (!ownerIds.length) return new Map();
    const rows = await rowsOf<{ owner_id: string; in_flight: number }>(manager, IN_FLIGHT_BY_OWNER, [ownerIds]);
    return new Map(rows.map((r) => [r.owner_id, r.in_flight]));
  }

  /**
   * Due jobs, locked by the caller, that must wait for capacity on `provider`: they keep their place in the queue
   * and claims take them only as the provider has room. Returns the ids that were not waiting on it already.
   */
  async markWaiting(ids: string[], provider: string, manager: Queryable): Promise<string[]> {
    const rows = await rowsOf<{ id: string }>(manager, MARK_WAITING, [ids, provider]);
    return rows.map((r) => r.id);
  }

  /**
   * A job that waits, with no attempt, for a provider's pause or cooldown to end: `pending`, waiting on the provider,
   * due at that end. Under the caller's row lock. The end is a bound, not a promise: when the provider opens
   * earlier, CapacityRepository.wakeDeferred makes it due at once.
   */
  async deferOn(id: string, provider: string, delayMs: number, manager: Queryable): Promise<void> {
    await run(manager, DEFER_ON, [id, provider, Math.max(0, delayMs)]);
  }

  /** Jobs waiting on providers this catalog does not name (a catalog change) are planned afresh. */
  async releaseWaitsOutside(known: string[], manager: Queryable): Promise<number> {
    const rows = await rowsOf<{ id: string }>(manager, RELEASE_WAITS_OUTSIDE, [known]);
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
    await run(manager, UPDATE_BOOKKEEPING, [id, status, nextAttemptInMs === undefined, nextAttemptInMs ?? null]);
  }
}
