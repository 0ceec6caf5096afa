import { Injectable } from '@nestjs/common';

import { type Queryable, rowsOf } from '../database/transactions.js';
import type { AttemptStatus, Usage } from './attempt.types.js';
import type { JobStatus } from './job.types.js';
import { CANCEL_IF_LIVE, FAIL_IF_VERSION, SETTLE_RESULTS } from './settlement.sql.js';

export interface ArrivedResultWrite {
  jobId: string;
  attemptId: string;
  /** The attempt statuses from which `succeeded` is a legal move (the state machine's, passed in). */
  eligibleFrom: readonly AttemptStatus[];
  value: unknown;
  usage: Usage;
  providerRequestId: string | null;
  /** Recorded when the attempt leaves `unknown` (default `deadline`: the call's own late answer). */
  resolvedBy?: string;
  providerStatus?: string | null;
  resultDigest: string;
}

/** What the settlement statement saw under its locks, and what it did. */
export interface SettledResult {
  /** The job's new version when the result won; null when it lost. */
  version: number | null;
  /** Outbox rows written for the win (one per subscribed endpoint). */
  announced: number;
  attemptFrom: AttemptStatus;
  attemptTo: AttemptStatus;
  /** Set when this attempt had already delivered a result (the same answer reported twice). */
  priorOutcome: string | null;
  provider: string;
  jobFrom: JobStatus;
  jobVersion: number;
  readVersion: number;
  winner: string | null;
}

/**
 * The compare-and-swap statements of I5, written by hand: TypeORM's save() with @VersionColumn does not put the
 * version in the WHERE clause (docs/design.md#why-hand-written-sql). Callers hold the job's row lock.
 */
@Injectable()
export class SettlementRepository {
  /** One result: a batch of one (settleResults). Undefined when the attempt is not the job's. */
  async settleResult(write: ArrivedResultWrite, manager: Queryable): Promise<SettledResult | undefined> {
    return (await this.settleResults([write], manager)).get(write.attemptId);
  }

  /**
   * One autocommit statement settles a batch of results, each exactly as if alone (I5): it locks the jobs in id
   * order, then their attempts in id order (the attempts' scan waits for every job lock through an InitPlan, so
   * the job-then-attempt order of every other writer holds and two batches cannot deadlock), makes each
   * compare-and-swap on the job (`version = read version AND completed_by IS NULL`), writes each attempt's
   * outcome (won, or discarded with the payload's digest only), the events and the winners' outbox rows.
   * Callers send at most one result per job in a batch. The map has no entry for an attempt that is not its
   * job's.
   */
  async settleResults(writes: ArrivedResultWrite[], manager: Queryable): Promise<Map<string, SettledResult>> {
    if (!writes.length) return new Map();
    const eligibleFrom = writes[0].eligibleFrom;
    if (writes.some((w) => w.eligibleFrom.join() !== eligibleFrom.join())) {
      throw new Error('a settlement batch shares one eligibleFrom');
    }
    const rows = await rowsOf<{
      attempt_id: string;
      version: number | null;
      announced: number;
      attempt_from: AttemptStatus;
      attempt_to: AttemptStatus | null;
      prior_outcome: string | null;
      provider: string;
      job_from: JobStatus;
      job_version: number;
      read_version: number;
      winner: string | null;
    }>(manager, SETTLE_RESULTS, [
      JSON.stringify(
        writes.map((w) => ({
          job_id: w.jobId,
          attempt_id: w.attemptId,
          value: w.value,
          usage: w.usage,
          provider_request_id: w.providerRequestId,
          result_digest: w.resultDigest,
          resolved_by: w.resolvedBy ?? 'deadline',
          provider_status: w.providerStatus ?? null,
        })),
      ),
      eligibleFrom,
    ]);
    const settled = new Map<string, SettledResult>();
    for (const row of rows) {
      settled.set(row.attempt_id, {
        version: row.version,
        announced: row.announced,
        attemptFrom: row.attempt_from,
        attemptTo: row.attempt_to ?? row.attempt_from,
        priorOutcome: row.prior_outcome,
        provider: row.provider,
        jobFrom: row.job_from,
        jobVersion: row.job_version,
        readVersion: row.read_version,
        winner: row.winner,
      });
    }
    return settled;
  }

  /** A final failure goes through the same compare-and-swap. Undefined when something else settled first. */
  async failIfVersion(
    jobId: string,
    readVersion: number,
    error: unknown,
    manager: Queryable,
  ): Promise<number | undefined> {
    const rows = await rowsOf<{ version: number }>(manager, FAIL_IF_VERSION, [
      jobId,
      readVersion,
      JSON.stringify(error),
    ]);
    return rows[0]?.version;
  }

  /** The fence: cancelling bumps the version, so every in-flight result loses its compare-and-swap. */
  async cancelIfLive(jobId: string, manager: Queryable): Promise<number | undefined> {
    const rows = await rowsOf<{ version: number }>(manager, CANCEL_IF_LIVE, [jobId]);
    return rows[0]?.version;
  }
}
