import { AttemptsRepository, type ClaimedStart } from '../../src/ledger/attempts.repository.js';
import { AttemptInProgressError } from '../../src/ledger/ledger.errors.js';
import { createAttempt, createJob } from '../factories/index.js';
import { type MigratedDatabase, migratedDatabase } from './database.js';

/** The attempts table's write statements (INSERT_CLAIMED, MARK_RUNNING, the plain insert) on a real PostgreSQL. */
describe('AttemptsRepository (real PostgreSQL, no app)', () => {
  let m: MigratedDatabase;
  let attempts: AttemptsRepository;

  beforeAll(async () => {
    m = await migratedDatabase();
    attempts = new AttemptsRepository(m.dataSource);
  });
  afterAll(() => m.close());
  beforeEach(() => m.truncate());

  const events = (jobId: string) =>
    m.dataSource.query(
      `SELECT subject, from_status, to_status, reason FROM job_events WHERE job_id = $1 AND reason <> 'created' ORDER BY id`,
      [jobId],
    );

  it('refuses a second live attempt on a job with AttemptInProgressError (I3: UQ_attempts_one_live_per_job)', async () => {
    const job = await createJob(m.dataSource);
    await createAttempt(m.dataSource, job, { status: 'unknown' });
    const second = {
      jobId: job.id,
      provider: 'sim-fallback',
      jobVersion: 0,
      timeoutMs: 1000,
      hardTimeoutMs: 2000,
      workerId: null,
    };
    await expect(attempts.insertAttempt(second, m.dataSource.manager)).rejects.toBeInstanceOf(AttemptInProgressError);
    const [{ n }] = await m.dataSource.query('SELECT count(*)::int AS n FROM attempts WHERE job_id = $1', [job.id]);
    expect(n).toBe(1);
  });

  it('writes a claim whole (INSERT_CLAIMED): the attempts numbered after the last, the jobs running, one event each', async () => {
    const fresh = await createJob(m.dataSource);
    const retried = await createJob(m.dataSource);
    await createAttempt(m.dataSource, retried, { status: 'failed', error: { reason: 'http_500', message: 'x' } });
    const start = (jobId: string): ClaimedStart => ({
      jobId,
      provider: 'sim-primary',
      jobVersion: 0,
      timeoutMs: 1000,
      hardTimeoutMs: 2000,
      workerId: 'w1',
      jobFrom: 'pending',
    });
    const inserted = await m.dataSource.transaction((tx) =>
      attempts.insertClaimed([start(fresh.id), start(retried.id)], tx),
    );
    expect(inserted.map((a) => [a.jobId, a.number, a.status, a.workerId])).toEqual([
      [fresh.id, 1, 'starting', 'w1'],
      [retried.id, 2, 'starting', 'w1'],
    ]);
    const jobs = await m.dataSource.query('SELECT status, next_attempt_at FROM jobs WHERE id = ANY($1) ORDER BY id', [
      [fresh.id, retried.id],
    ]);
    expect(jobs).toEqual([
      { status: 'running', next_attempt_at: null },
      { status: 'running', next_attempt_at: null },
    ]);
    expect(await events(fresh.id)).toEqual([
      { subject: 'attempt', from_status: null, to_status: 'starting', reason: 'claimed' },
      { subject: 'job', from_status: 'pending', to_status: 'running', reason: 'attempt_started' },
    ]);
  });

  it('marks running (MARK_RUNNING) only a starting attempt whose hard deadline has not passed', async () => {
    const [a, b, c] = await Promise.all([1, 2, 3].map(() => createJob(m.dataSource)));
    const ready = await createAttempt(m.dataSource, a, { status: 'starting' });
    const late = await createAttempt(m.dataSource, b, { status: 'starting', hardDeadlineInMs: -1 });
    const givenUp = await createAttempt(m.dataSource, c, {
      status: 'failed',
      error: { reason: 'not_sent', message: 'x' },
    });
    const calls = [ready, late, givenUp].map((x) => ({ id: x.id, timeoutMs: 1000, hardTimeoutMs: 2000 }));
    const running = await attempts.markRunning(calls, m.dataSource.manager);
    expect(running.map((x) => x.id)).toEqual([ready.id]);
    expect(await events(a.id)).toEqual([
      { subject: 'attempt', from_status: 'starting', to_status: 'running', reason: 'provider_called' },
    ]);
    expect(await events(b.id)).toEqual([]);
    const [row] = await m.dataSource.query('SELECT status FROM attempts WHERE id = $1', [late.id]);
    expect(row.status).toBe('starting');
  });
});
