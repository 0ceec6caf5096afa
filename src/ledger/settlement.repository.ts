import { Injectable } from '@nestjs/common';

import { prepared } from '../database/prepared-statements.js';
import { type Queryable, rowsOf } from '../database/transactions.js';
import { announcementSql } from './announcement.sql.js';
import type { AttemptStatus, Usage } from './attempt.types.js';
import type { JobStatus } from './job.types.js';

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
 * A batch of results' settlement in one statement (see settleResults); named, as the hot statements are
 * (database/prepared-statements.ts).
 */
const SETTLE_RESULTS = prepared(`WITH p AS MATERIALIZED (
         SELECT * FROM jsonb_to_recordset($1::jsonb)
                    AS p(job_id uuid, attempt_id uuid, value jsonb, usage jsonb, provider_request_id text, result_digest text,
                          resolved_by text, provider_status text)
       ), j AS MATERIALIZED (
         SELECT id, status, version, completed_by FROM jobs WHERE id IN (SELECT job_id FROM p) ORDER BY id FOR UPDATE
       ), a AS MATERIALIZED (
         SELECT x.id, x.job_id, x.status, x.outcome, x.job_version, x.provider FROM attempts x
          WHERE x.id IN (SELECT attempt_id FROM p) AND x.job_id = ANY ((SELECT array_agg(id) FROM j)::uuid[])
          ORDER BY x.id FOR UPDATE
       ), won AS (
         UPDATE jobs t SET status = 'succeeded', result = p.value, completed_by = a.id, version = t.version + 1,
                completed_at = now(), updated_at = now(), next_attempt_at = NULL
           FROM a JOIN p ON p.attempt_id = a.id
          WHERE t.id = a.job_id AND t.completed_by IS NULL AND t.version = a.job_version
            AND a.outcome IS NULL AND a.status = ANY($2::text[])
          RETURNING t.id, t.version, t.owner_id, t.operation, t.idempotency_key, t.completed_at, t.completed_by, t.result
       ), outbox AS (
         -- The transactional outbox (docs/operations.md#webhooks): the owner's subscribed endpoints get the
         -- announcement in this same statement, so a committed win is always announced and a loss never is.
         INSERT INTO webhook_deliveries (endpoint_id, owner_id, job_id, event_type, payload)
         SELECT w.id, won.owner_id, won.id, 'job.succeeded',
                ${announcementSql('won', { type: "'job.succeeded'", attemptId: 'NULL', status: "'succeeded'", error: 'NULL' })}
           FROM won JOIN webhook_endpoints w ON w.owner_id = won.owner_id AND w.status = 'enabled' AND 'job.succeeded' = ANY (w.events)
          RETURNING job_id
       ), att AS (
         UPDATE attempts x SET status = CASE WHEN a.status = ANY($2::text[]) THEN 'succeeded' ELSE x.status END,
                outcome = CASE WHEN won.id IS NOT NULL THEN 'won' ELSE 'discarded' END,
                usage = p.usage, provider_request_id = COALESCE(p.provider_request_id, x.provider_request_id),
                result_digest = p.result_digest, finished_at = COALESCE(x.finished_at, now()),
                resolved_by = CASE WHEN a.status = 'unknown' THEN p.resolved_by ELSE x.resolved_by END,
                provider_status = COALESCE(p.provider_status, x.provider_status)
           FROM a JOIN p ON p.attempt_id = a.id LEFT JOIN won ON won.completed_by = a.id
          WHERE x.id = a.id AND a.outcome IS NULL
          RETURNING x.id, x.status, x.outcome
       ), ev AS (
         INSERT INTO job_events (job_id, attempt_id, subject, from_status, to_status, reason, detail)
         SELECT a.job_id, a.id, 'attempt', a.status, att.status,
                CASE WHEN att.outcome = 'won' THEN 'result_won' ELSE 'result_discarded' END,
                CASE WHEN att.outcome = 'won' THEN NULL
                     ELSE jsonb_build_object('resultDigest', p.result_digest, 'readVersion', a.job_version, 'jobVersion', j.version,
                                             'winner', j.completed_by, 'jobStatus', j.status) END
           FROM att JOIN a ON a.id = att.id JOIN p ON p.attempt_id = a.id JOIN j ON j.id = a.job_id
         UNION ALL
         SELECT won.id, NULL, 'job', j.status, 'succeeded', 'result_won', jsonb_build_object('attemptId', won.completed_by, 'version', won.version)
           FROM won JOIN j ON j.id = won.id
       )
       SELECT a.id AS attempt_id, won.version, (SELECT count(*)::int FROM outbox o WHERE o.job_id = a.job_id) AS announced,
              a.status AS attempt_from, att.status AS attempt_to, a.outcome AS prior_outcome, a.provider,
              j.status AS job_from, j.version AS job_version, a.job_version AS read_version, j.completed_by AS winner
         FROM a JOIN j ON j.id = a.job_id LEFT JOIN att ON att.id = a.id LEFT JOIN won ON won.completed_by = a.id`);

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
    const rows = await rowsOf<{ version: number }>(
      manager,
      `UPDATE jobs SET status = 'failed', error = $3::jsonb, version = version + 1, completed_at = now(), updated_at = now(), next_attempt_at = NULL
        WHERE id = $1 AND version = $2 AND completed_by IS NULL
        RETURNING version`,
      [jobId, readVersion, JSON.stringify(error)],
    );
    return rows[0]?.version;
  }

  /** The fence: cancelling bumps the version, so every in-flight result loses its compare-and-swap. */
  async cancelIfLive(jobId: string, manager: Queryable): Promise<number | undefined> {
    const rows = await rowsOf<{ version: number }>(
      manager,
      `UPDATE jobs SET status = 'cancelled', version = version + 1, next_attempt_at = NULL, completed_at = now(), updated_at = now(),
              error = jsonb_build_object('reason', 'cancelled', 'message', 'The owner cancelled the job.')
        WHERE id = $1 AND status IN ('pending', 'running', 'unknown')
        RETURNING version`,
      [jobId],
    );
    return rows[0]?.version;
  }
}
