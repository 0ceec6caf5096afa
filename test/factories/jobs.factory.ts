import type { DataSource } from 'typeorm';

import { fingerprintOf } from '../../src/common/fingerprint.js';
import { rowsOf } from '../../src/database/transactions.js';
import type { Job, JobStatus } from '../../src/ledger/job.types.js';
import { jobFromRow, type JobRow } from '../../src/ledger/job.types.js';
import { JobsRepository, type NewJob } from '../../src/ledger/jobs.repository.js';
import { bearer, type TestApp } from '../helpers/app.js';
import { createAttempt } from './attempts.factory.js';

export interface JobOverrides extends Partial<Omit<NewJob, 'fingerprint'>> {
  /** The state to leave the job in (default `pending`, due now); `succeeded` gets a winning attempt. */
  status?: JobStatus;
  /** False: not due (next_attempt_at NULL), so no worker claims it. Live statuses other than pending are never due. */
  due?: boolean;
  result?: unknown;
  error?: unknown;
  createdAt?: Date;
  completedAt?: Date;
}

let seq = 0;

/** A job's defaults: the test catalog's `summarize` on its default chain, a key of its own. */
function newJob(overrides: JobOverrides): NewJob {
  const idempotencyKey = overrides.idempotencyKey ?? `job-${process.pid}-${++seq}`;
  const operation = overrides.operation ?? 'summarize';
  const input = overrides.input ?? { text: idempotencyKey };
  const providers = overrides.providers ?? ['sim-primary', 'sim-fallback'];
  return {
    ownerId: overrides.ownerId ?? 'owner-factory',
    idempotencyKey,
    operation,
    input,
    providers,
    fingerprint: fingerprintOf({ operation, input, providers: overrides.providers ?? null }),
    traceContext: overrides.traceContext ?? null,
    waitingFor: overrides.waitingFor ?? null,
    priority: overrides.priority,
  };
}

/**
 * A job in any state. It is inserted by the service's own create statement (JobsRepository.insertJob in a
 * transaction: INSERT_JOB, with its `created` event), then moved to `status` by one UPDATE that keeps the schema's
 * checks (a terminal job has completed_at, a settled one a bumped version, a succeeded one its winner). The move
 * writes no job_events row: what a test seeds is a state, not a history.
 */
export async function createJob(db: DataSource, overrides: JobOverrides = {}): Promise<Job> {
  const job = await db.transaction((manager) => new JobsRepository(db).insertJob(newJob(overrides), manager));
  const status = overrides.status ?? 'pending';
  let winner: string | null = null;
  if (status === 'succeeded') {
    winner = (await createAttempt(db, job, { status: 'succeeded', moveJob: false })).id;
  }
  const terminal = status === 'succeeded' || status === 'failed' || status === 'cancelled';
  const defaultError =
    status === 'failed' ? { reason: 'providers_exhausted', message: 'seeded by a test factory' } : null;
  const [row] = await rowsOf<JobRow>(
    db.manager,
    `UPDATE jobs SET status = $2, version = version + $3::int, completed_by = $4, result = $5::jsonb,
            error = $6::jsonb, completed_at = CASE WHEN $3::int = 1 THEN COALESCE($8::timestamptz, now()) END,
            next_attempt_at = CASE WHEN $2 = 'pending' AND $7::boolean THEN next_attempt_at END,
            created_at = COALESCE($9::timestamptz, created_at), updated_at = now()
      WHERE id = $1
      RETURNING *`,
    [
      job.id,
      status,
      terminal ? 1 : 0,
      winner,
      status === 'succeeded'
        ? JSON.stringify(overrides.result ?? { summary: `result of ${job.idempotencyKey}` })
        : null,
      (overrides.error ?? defaultError) ? JSON.stringify(overrides.error ?? defaultError) : null,
      overrides.due ?? true,
      overrides.completedAt ?? null,
      overrides.createdAt ?? null,
    ],
  );
  return jobFromRow(row);
}

export interface PostJobOverrides {
  idempotencyKey?: string;
  operation?: string;
  input?: unknown;
  providers?: string[];
}

/**
 * A job created over HTTP (`POST /v1/jobs`), the way a client creates one: its body, once the answer is `expected`
 * (201; 200 for a replay). For the suites that test what the API does with it; createJob is the quicker way to a
 * job in a given state.
 */
export async function postJob(
  t: Pick<TestApp, 'http'>,
  apiKey: string,
  overrides: PostJobOverrides = {},
  expected = 201,
) {
  const idempotencyKey = overrides.idempotencyKey ?? `post-${process.pid}-${++seq}`;
  const res = await t
    .http()
    .post('/v1/jobs')
    .set(bearer(apiKey))
    .set('Idempotency-Key', idempotencyKey)
    .send({
      operation: overrides.operation ?? 'summarize',
      input: overrides.input ?? { text: idempotencyKey },
      ...(overrides.providers && { providers: overrides.providers }),
    });
  if (res.status !== expected) throw new Error(`POST /v1/jobs answered ${res.status}: ${JSON.stringify(res.body)}`);
  return res.body;
}
