import { canonicalJson, sha256Hex } from '../../src/common/canonical-json.js';
import type { Attempt } from '../../src/ledger/attempt.types.js';
import { type ArrivedResultWrite, SettlementRepository } from '../../src/ledger/settlement.repository.js';
import { attemptSourcesOf } from '../../src/ledger/state-machine.js';
import { createAttempt, createJob } from '../factories/index.js';
import { type MigratedDatabase, migratedDatabase } from './database.js';

/** The compare-and-swap of I5 (SETTLE_RESULTS, failIfVersion, cancelIfLive) on a real PostgreSQL, no app. */
describe('SettlementRepository (real PostgreSQL, no app)', () => {
  let m: MigratedDatabase;
  const settlements = new SettlementRepository();

  beforeAll(async () => {
    m = await migratedDatabase();
  });
  afterAll(() => m.close());
  beforeEach(() => m.truncate());

  const write = (attempt: Attempt, value: unknown = { summary: `from ${attempt.id}` }): ArrivedResultWrite => ({
    jobId: attempt.jobId,
    attemptId: attempt.id,
    eligibleFrom: attemptSourcesOf('succeeded'),
    value,
    usage: { promptTokens: 10, completionTokens: 5 },
    providerRequestId: null,
    resultDigest: sha256Hex(canonicalJson(value)),
  });
  const jobRow = async (id: string) => (await m.dataSource.query('SELECT * FROM jobs WHERE id = $1', [id]))[0];
  const attemptRow = async (id: string) => (await m.dataSource.query('SELECT * FROM attempts WHERE id = $1', [id]))[0];

  /** The failover race: the first attempt given up (cancelled), the second running, both answer. */
  async function raced() {
    const job = await createJob(m.dataSource, { providers: ['sim-primary', 'sim-fallback'] });
    const first = await createAttempt(m.dataSource, job, { status: 'cancelled', provider: 'sim-primary' });
    const second = await createAttempt(m.dataSource, job, { status: 'running', provider: 'sim-fallback' });
    return { job, first, second };
  }

  it('gives exactly one of two concurrent results the job, and records the other as discarded with its digest', async () => {
    for (let round = 0; round < 15; round++) {
      const { job, first, second } = await raced();
      // Two autocommit statements on two pool connections, at once.
      const [a, b] = await Promise.all([
        settlements.settleResult(write(first), m.dataSource.manager),
        settlements.settleResult(write(second), m.dataSource.manager),
      ]);
      const winners = [a, b].filter((s) => s?.version !== null);
      expect(winners).toHaveLength(1);
      const [winner, loser] = a!.version !== null ? [first, second] : [second, first];
      const stored = await jobRow(job.id);
      expect(stored).toMatchObject({
        status: 'succeeded',
        version: 1,
        completed_by: winner.id,
        result: { summary: `from ${winner.id}` },
      });
      expect(await attemptRow(winner.id)).toMatchObject({ status: 'succeeded', outcome: 'won' });
      const lost = await attemptRow(loser.id);
      // The payload is dropped: only its digest is kept (I5), and the attempt says it lost.
      expect(lost).toMatchObject({
        status: 'succeeded',
        outcome: 'discarded',
        result_digest: write(loser).resultDigest,
      });
      const events = await m.dataSource.query(
        `SELECT attempt_id, subject, from_status, to_status, reason FROM job_events WHERE job_id = $1 AND reason LIKE 'result_%' ORDER BY id`,
        [job.id],
      );
      expect(events).toEqual(
        expect.arrayContaining([
          {
            attempt_id: winner.id,
            subject: 'attempt',
            from_status: winner.status,
            to_status: 'succeeded',
            reason: 'result_won',
          },
          { attempt_id: null, subject: 'job', from_status: 'running', to_status: 'succeeded', reason: 'result_won' },
          {
            attempt_id: loser.id,
            subject: 'attempt',
            from_status: loser.status,
            to_status: 'succeeded',
            reason: 'result_discarded',
          },
        ]),
      );
      expect(events).toHaveLength(3);
    }
  });

  it('discards a result whose read version is stale: the cancelled job keeps its status and version', async () => {
    const job = await createJob(m.dataSource);
    const attempt = await createAttempt(m.dataSource, job, { status: 'running' });
    const version = await settlements.cancelIfLive(job.id, m.dataSource.manager);
    expect(version).toBe(1);
    const settled = await settlements.settleResult(write(attempt), m.dataSource.manager);
    expect(settled).toMatchObject({ version: null, jobFrom: 'cancelled', jobVersion: 1, readVersion: 0 });
    expect(await jobRow(job.id)).toMatchObject({ status: 'cancelled', version: 1, result: null, completed_by: null });
    expect(await attemptRow(attempt.id)).toMatchObject({ outcome: 'discarded' });
  });

  it('changes nothing when the same result is delivered twice (worker and lookup)', async () => {
    const job = await createJob(m.dataSource);
    const attempt = await createAttempt(m.dataSource, job, { status: 'running' });
    const once = await settlements.settleResult(write(attempt), m.dataSource.manager);
    const before = await jobRow(job.id);
    const twice = await settlements.settleResult(write(attempt, { summary: 'another answer' }), m.dataSource.manager);
    expect(once).toMatchObject({ version: 1, priorOutcome: null });
    expect(twice).toMatchObject({ version: null, priorOutcome: 'won' });
    expect(await jobRow(job.id)).toEqual(before);
    const [{ n }] = await m.dataSource.query(
      `SELECT count(*)::int AS n FROM job_events WHERE job_id = $1 AND reason LIKE 'result_%'`,
      [job.id],
    );
    expect(n).toBe(2);
  });

  it('settles a batch of results for different jobs in one statement, each as if alone', async () => {
    const jobs = await Promise.all([1, 2, 3].map(() => createJob(m.dataSource)));
    const attempts = await Promise.all(jobs.map((job) => createAttempt(m.dataSource, job, { status: 'running' })));
    const settled = await settlements.settleResults(
      attempts.map((a) => write(a)),
      m.dataSource.manager,
    );
    expect([...settled.values()].map((s) => s.version)).toEqual([1, 1, 1]);
    for (const [i, job] of jobs.entries()) {
      expect(await jobRow(job.id)).toMatchObject({ status: 'succeeded', completed_by: attempts[i].id });
    }
  });

  it("leaves no trace for an attempt that is not the job's", async () => {
    const [job, other] = [await createJob(m.dataSource), await createJob(m.dataSource)];
    const attempt = await createAttempt(m.dataSource, other, { status: 'running' });
    expect(await settlements.settleResult({ ...write(attempt), jobId: job.id }, m.dataSource.manager)).toBeUndefined();
    expect(await jobRow(job.id)).toMatchObject({ status: 'pending', version: 0 });
    expect(await attemptRow(attempt.id)).toMatchObject({ status: 'running', outcome: null });
  });

  it('fails a job only at the version it read (failIfVersion): after a win, the failure changes nothing', async () => {
    const job = await createJob(m.dataSource);
    const attempt = await createAttempt(m.dataSource, job, { status: 'running' });
    await settlements.settleResult(write(attempt), m.dataSource.manager);
    const failed = await settlements.failIfVersion(job.id, 0, { reason: 'providers_exhausted' }, m.dataSource.manager);
    expect(failed).toBeUndefined();
    expect(await jobRow(job.id)).toMatchObject({ status: 'succeeded', version: 1, error: null });
  });
});
