import { Injectable } from '@nestjs/common';
import { DataSource } from 'typeorm';
import { uniqueViolationOf } from '../database/pg-errors.js';
import { on, updatedRows, type Queryable } from '../database/transactions.js';
import { AttemptInProgressError } from './attempts.errors.js';
import { attemptFromRow, type Attempt, type AttemptError, type AttemptOutcome, type AttemptStatus, type Usage } from './attempt.types.js';

export interface NewAttempt {
  jobId: string;
  provider: string;
  jobVersion: number;
  timeoutMs: number;
  hardTimeoutMs: number;
  /** Set when a worker inserts and runs it; null for an attempt the API queued for a worker. */
  workerId: string | null;
}

export interface AttemptUpdate {
  outcome?: AttemptOutcome;
  error?: AttemptError;
  usage?: Usage;
  providerRequestId?: string | null;
  resultDigest?: string;
  finished?: boolean;
}

@Injectable()
export class AttemptsRepository {
  constructor(private readonly dataSource: DataSource) {}

  async listForJob(jobId: string, manager?: Queryable): Promise<Attempt[]> {
    const rows = await on(this.dataSource, manager).query('SELECT * FROM attempts WHERE job_id = $1 ORDER BY number', [jobId]);
    return rows.map(attemptFromRow);
  }

  /** A plain INSERT: a second live attempt hits UQ_attempts_one_live_per_job (I3) and becomes a 409. */
  async insertAttempt(attempt: NewAttempt, manager: Queryable): Promise<Attempt> {
    try {
      const rows = await manager.query(
        `INSERT INTO attempts (job_id, number, provider, job_version, deadline_at, hard_deadline_at, claimed_at, worker_id)
         VALUES ($1, COALESCE((SELECT max(number) FROM attempts WHERE job_id = $1), 0) + 1, $2, $3,
                 now() + make_interval(secs => $4::float8 / 1000), now() + make_interval(secs => $5::float8 / 1000),
                 CASE WHEN $6::text IS NULL THEN NULL ELSE now() END, $6)
         RETURNING *`,
        [attempt.jobId, attempt.provider, attempt.jobVersion, attempt.timeoutMs, attempt.hardTimeoutMs, attempt.workerId],
      );
      return attemptFromRow(rows[0]);
    } catch (error) {
      if (uniqueViolationOf(error) === 'UQ_attempts_one_live_per_job') throw new AttemptInProgressError();
      throw error;
    }
  }

  /** A worker takes over an attempt the API queued: its deadlines start now. */
  async claimQueued(attemptId: string, workerId: string, timeoutMs: number, hardTimeoutMs: number, manager: Queryable): Promise<Attempt | undefined> {
    const result = await manager.query(
      `UPDATE attempts SET claimed_at = now(), worker_id = $2, started_at = now(),
              deadline_at = now() + make_interval(secs => $3::float8 / 1000), hard_deadline_at = now() + make_interval(secs => $4::float8 / 1000)
        WHERE id = $1 AND status = 'starting' AND claimed_at IS NULL RETURNING *`,
      [attemptId, workerId, timeoutMs, hardTimeoutMs],
    );
    const rows = updatedRows<Record<string, unknown>>(result);
    return rows[0] && attemptFromRow(rows[0]);
  }

  async lockById(attemptId: string, manager: Queryable): Promise<Attempt | undefined> {
    const rows = await manager.query('SELECT * FROM attempts WHERE id = $1 FOR UPDATE', [attemptId]);
    return rows[0] && attemptFromRow(rows[0]);
  }

  /** The attempt with its job's owner, so the API can wall owners off (I7). */
  /** Any owner's attempt: only operators (`attempts:resolve`) look attempts up by id alone. */
  async findJobId(attemptId: string): Promise<string | undefined> {
    const rows: Array<{ job_id: string }> = await this.dataSource.query('SELECT job_id FROM attempts WHERE id = $1', [attemptId]);
    return rows[0]?.job_id;
  }

  /** Writes a transition the caller has checked against the state machine, under the job's row lock. */
  async updateStatus(attemptId: string, to: AttemptStatus, update: AttemptUpdate, manager: Queryable): Promise<Attempt> {
    const result = await manager.query(
      `UPDATE attempts SET status = $2,
              outcome = COALESCE($3, outcome), error = COALESCE($4::jsonb, error), usage = COALESCE($5::jsonb, usage),
              provider_request_id = COALESCE($6, provider_request_id), result_digest = COALESCE($7, result_digest),
              finished_at = CASE WHEN $8 THEN COALESCE(finished_at, now()) ELSE finished_at END
        WHERE id = $1 RETURNING *`,
      [
        attemptId,
        to,
        update.outcome ?? null,
        update.error ? JSON.stringify(update.error) : null,
        update.usage ? JSON.stringify(update.usage) : null,
        update.providerRequestId ?? null,
        update.resultDigest ?? null,
        update.finished ?? false,
      ],
    );
    return attemptFromRow(updatedRows<Record<string, unknown>>(result)[0]);
  }

  /** Claimed attempts still starting or running past their deadline (their worker may be gone). */
  async findOverdue(limit: number): Promise<Array<{ id: string; jobId: string }>> {
    const rows: Array<{ id: string; job_id: string }> = await this.dataSource.query(
      `SELECT id, job_id FROM attempts
        WHERE status IN ('starting', 'running') AND claimed_at IS NOT NULL AND deadline_at < now()
        ORDER BY deadline_at LIMIT $1`,
      [limit],
    );
    return rows.map((r) => ({ id: r.id, jobId: r.job_id }));
  }

  /** Unknown attempts of jobs still live: the timeout policy decides what to do with them. */
  async findUnknownOfLiveJobs(limit: number): Promise<Attempt[]> {
    const rows = await this.dataSource.query(
      `SELECT a.* FROM attempts a JOIN jobs j ON j.id = a.job_id
        WHERE a.status = 'unknown' AND j.status IN ('pending', 'running', 'unknown')
        ORDER BY a.deadline_at LIMIT $1`,
      [limit],
    );
    return rows.map(attemptFromRow);
  }

  /** Unknown attempts of finished jobs whose hard deadline passed: nobody is listening any more. */
  async findAbandoned(limit: number): Promise<Array<{ id: string; jobId: string }>> {
    const rows: Array<{ id: string; job_id: string }> = await this.dataSource.query(
      `SELECT a.id, a.job_id FROM attempts a JOIN jobs j ON j.id = a.job_id
        WHERE a.status = 'unknown' AND j.status IN ('succeeded', 'failed', 'cancelled') AND a.hard_deadline_at < now()
        LIMIT $1`,
      [limit],
    );
    return rows.map((r) => ({ id: r.id, jobId: r.job_id }));
  }

  async operationOfJob(jobId: string): Promise<string> {
    const rows: Array<{ operation: string }> = await this.dataSource.query('SELECT operation FROM jobs WHERE id = $1', [jobId]);
    return rows[0].operation;
  }

  async countUnknown(): Promise<number> {
    const rows: Array<{ n: number }> = await this.dataSource.query(`SELECT count(*)::int AS n FROM attempts WHERE status = 'unknown'`);
    return rows[0].n;
  }
}
