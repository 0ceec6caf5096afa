import type { DataSource } from 'typeorm';

import { rowsOf } from '../../src/database/transactions.js';
import {
  type Attempt,
  attemptFromRow,
  type AttemptRow,
  type AttemptStatus,
  type Usage,
} from '../../src/ledger/attempt.types.js';
import type { Job } from '../../src/ledger/job.types.js';

export interface AttemptOverrides {
  /** Default: the job's primary. */
  provider?: string;
  /** Default `starting`. */
  status?: AttemptStatus;
  /** Default: the job's next number. */
  number?: number;
  /** The job version the attempt read when it started (I5); default the job's. */
  jobVersion?: number;
  /** Default `won` for a succeeded attempt, none otherwise. */
  outcome?: 'won' | 'discarded' | null;
  error?: unknown;
  usage?: Usage | null;
  /** The claiming worker; null for an attempt the API queued that no worker took. Default `factory-worker`. */
  workerId?: string | null;
  /** The deadline from now (negative: passed). Default 60 s, or a minute ago for an `unknown` attempt. */
  deadlineInMs?: number;
  /** The hard deadline from now. Default one hour. */
  hardDeadlineInMs?: number;
  /** How long ago it was claimed and started. Default 0; an `unknown` attempt's default is two minutes. */
  startedAgoMs?: number;
  /**
   * A live attempt moves a live job with it (default true): `running` for starting and running, `unknown` for
   * unknown, not due any more, as the claim and the reconciler leave it. No job_events row is written.
   */
  moveJob?: boolean;
}

const LIVE: readonly AttemptStatus[] = ['starting', 'running', 'unknown'];

/**
 * An attempt in any state under `job`, by one INSERT that names its columns and keeps the schema's checks (its
 * number, an outcome only on a finished attempt, finished_at when it ended). I3 holds: a second live attempt on a
 * job fails here with UQ_attempts_one_live_per_job, as it does in the service.
 */
export async function createAttempt(
  db: DataSource,
  job: Pick<Job, 'id'> & Partial<Pick<Job, 'providers' | 'version'>>,
  overrides: AttemptOverrides = {},
): Promise<Attempt> {
  const known = job.providers && job.version !== undefined ? job : await readJob(db, job.id);
  const status = overrides.status ?? 'starting';
  const unknown = status === 'unknown';
  const finished = !LIVE.includes(status);
  const workerId = overrides.workerId === undefined ? 'factory-worker' : overrides.workerId;
  const [row] = await rowsOf<AttemptRow>(
    db.manager,
    `INSERT INTO attempts (job_id, number, provider, job_version, status, outcome, error, usage, worker_id,
                           deadline_at, hard_deadline_at, started_at, claimed_at, finished_at)
     SELECT $1, COALESCE($2::int, (SELECT max(number) FROM attempts WHERE job_id = $1), 0) + CASE WHEN $2::int IS NULL THEN 1 ELSE 0 END,
            $3, $4, $5, $6, $7::jsonb, $8::jsonb, $9,
            now() + make_interval(secs => $10::float8 / 1000), now() + make_interval(secs => $11::float8 / 1000),
            s.at, CASE WHEN $9::text IS NOT NULL THEN s.at END, CASE WHEN $12::boolean THEN now() END
       FROM (SELECT now() - make_interval(secs => $13::float8 / 1000) AS at) s
     RETURNING *`,
    [
      job.id,
      overrides.number ?? null,
      overrides.provider ?? known.providers![0],
      overrides.jobVersion ?? known.version,
      status,
      overrides.outcome === undefined ? (status === 'succeeded' ? 'won' : null) : overrides.outcome,
      overrides.error === undefined ? null : JSON.stringify(overrides.error),
      overrides.usage == null ? null : JSON.stringify(overrides.usage),
      workerId,
      overrides.deadlineInMs ?? (unknown ? -60_000 : 60_000),
      overrides.hardDeadlineInMs ?? 3_600_000,
      finished,
      overrides.startedAgoMs ?? (unknown ? 120_000 : 0),
    ],
  );
  if ((overrides.moveJob ?? true) && !finished) {
    await db.query(
      `UPDATE jobs SET status = $2, next_attempt_at = NULL, waiting_for = NULL, updated_at = now()
        WHERE id = $1 AND status IN ('pending', 'running', 'unknown')`,
      [job.id, unknown ? 'unknown' : 'running'],
    );
  }
  return attemptFromRow(row);
}

async function readJob(db: DataSource, id: string): Promise<Pick<Job, 'providers' | 'version'>> {
  const [row] = await db.query<Array<{ providers: string[]; version: number }>>(
    'SELECT providers, version FROM jobs WHERE id = $1',
    [id],
  );
  if (!row) throw new Error(`no job ${id}`);
  return row;
}
