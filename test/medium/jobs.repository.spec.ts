import { fingerprintOf } from '../../src/common/fingerprint.js';
import type { WaitingRoom } from '../../src/ledger/jobs.repository.js';
import { JobsRepository, type NewJob } from '../../src/ledger/jobs.repository.js';
import { FAIR_CREDIT } from '../../src/ledger/jobs.sql.js';
import { DuplicateIdempotencyKeyError } from '../../src/ledger/ledger.errors.js';
import { createAttempt, createJob } from '../factories/index.js';
import { type MigratedDatabase, migratedDatabase } from './database.js';

const NO_WAITING = { providers: [], rooms: [] };

/** The jobs table's write statements (the create, the claim) on a real PostgreSQL, no app. */
describe('JobsRepository (real PostgreSQL, no app)', () => {
  let m: MigratedDatabase;
  let jobs: JobsRepository;

  beforeAll(async () => {
    m = await migratedDatabase(12);
    jobs = new JobsRepository(m.dataSource);
  });
  afterAll(() => m.close());
  beforeEach(() => m.truncate());

  const intent = (ownerId: string, idempotencyKey: string, text = 'x'): NewJob => ({
    ownerId,
    idempotencyKey,
    operation: 'summarize',
    input: { text },
    providers: ['sim-primary'],
    fingerprint: fingerprintOf({ operation: 'summarize', input: { text } }),
  });
  const count = async (sql: string, params: unknown[] = []) => (await m.dataSource.query(sql, params))[0].n as number;

  describe('the create and its duplicate-key outcome (I1)', () => {
    it('makes one job of 20 concurrent creates with one key (group commit); the other 19 get DuplicateIdempotencyKeyError', async () => {
      const answers = await Promise.allSettled(Array.from({ length: 20 }, () => jobs.insertJob(intent('o1', 'same'))));
      const created = answers.filter((a) => a.status === 'fulfilled');
      const refused = answers.flatMap((a) => (a.status === 'rejected' ? [a.reason] : []));
      expect(created).toHaveLength(1);
      expect(refused).toHaveLength(19);
      for (const error of refused) expect(error).toBeInstanceOf(DuplicateIdempotencyKeyError);
      expect(await count(`SELECT count(*)::int AS n FROM jobs WHERE owner_id = 'o1'`)).toBe(1);
      expect(await count(`SELECT count(*)::int AS n FROM job_events WHERE reason = 'created'`)).toBe(1);
    });

    it('answers DuplicateIdempotencyKeyError in a transaction too (INSERT_JOB), and leaves the stored job as it was', async () => {
      const first = await m.dataSource.transaction((tx) => jobs.insertJob(intent('o2', 'k', 'first'), tx));
      await expect(
        m.dataSource.transaction((tx) => jobs.insertJob(intent('o2', 'k', 'second'), tx)),
      ).rejects.toMatchObject({
        name: 'DuplicateIdempotencyKeyError',
        fingerprint: fingerprintOf({ operation: 'summarize', input: { text: 'second' } }),
      });
      const [row] = await m.dataSource.query(`SELECT id, input, fingerprint FROM jobs WHERE owner_id = 'o2'`);
      expect(row).toEqual({ id: first.id, input: { text: 'first' }, fingerprint: first.fingerprint });
    });

    it('keeps owners apart: one key, two owners, two jobs', async () => {
      const [a, b] = await Promise.all([
        jobs.insertJob(intent('oa', 'shared')),
        jobs.insertJob(intent('ob', 'shared')),
      ]);
      expect(a.id).not.toBe(b.id);
      expect(await count(`SELECT count(*)::int AS n FROM jobs WHERE idempotency_key = 'shared'`)).toBe(2);
    });
  });

  describe('the claim (CLAIM_DUE)', () => {
    it('hands a due job to one of two concurrent claims only (SKIP LOCKED): the second claim takes the rest', async () => {
      const due = await Promise.all(Array.from({ length: 10 }, () => createJob(m.dataSource)));
      const [first, second] = await m.dataSource.transaction(async (tx1) => {
        const mine = (await jobs.claimDue(4, NO_WAITING, tx1)).jobs;
        // Another worker's claim on another connection, while the first still holds its row locks.
        const theirs = (await m.dataSource.transaction((tx2) => jobs.claimDue(10, NO_WAITING, tx2))).jobs;
        return [mine, theirs];
      });
      expect(first).toHaveLength(4);
      expect(second).toHaveLength(6);
      const ids = [...first, ...second].map((j) => j.id);
      expect(new Set(ids).size).toBe(10);
      expect(new Set(ids)).toEqual(new Set(due.map((j) => j.id)));
    });

    it('never claims a job that is not due, terminal, or in hand with a live attempt', async () => {
      const due = await createJob(m.dataSource);
      await createJob(m.dataSource, { due: false });
      await createJob(m.dataSource, { status: 'succeeded' });
      await createJob(m.dataSource, { status: 'cancelled' });
      const live = await createJob(m.dataSource);
      await createAttempt(m.dataSource, live, { status: 'running' });
      const claimed = (await m.dataSource.transaction((tx) => jobs.claimDue(10, NO_WAITING, tx))).jobs;
      expect(claimed.map((j) => j.id)).toEqual([due.id]);
    });

    it('takes jobs waiting for capacity only up to the room their provider has', async () => {
      const waiting = [];
      for (let i = 0; i < 3; i++) waiting.push(await createJob(m.dataSource, { waitingFor: 'capped' }));
      await createJob(m.dataSource, { waitingFor: 'closed' });
      const { jobs: claimed } = await m.dataSource.transaction((tx) =>
        jobs.claimDue(10, { providers: ['capped', 'closed'], rooms: [2, 0] }, tx),
      );
      // The oldest two of the capped provider's queue, none of the closed one's.
      expect(claimed.map((j) => j.id)).toEqual(waiting.slice(0, 2).map((j) => j.id));
    });
  });

  describe('the sole-owner claim (CLAIM_SOLE, then CLAIM_DUE when there is anyone to be fair to)', () => {
    const claim = (limit: number, waiting: WaitingRoom = NO_WAITING) =>
      m.dataSource.transaction((tx) => jobs.claimDue(limit, waiting, tx, true));

    it("takes one owner's jobs highest priority then oldest, as the fair claim does, and says it went alone", async () => {
      const old = await createJob(m.dataSource, { ownerId: 'a' });
      const urgent = await createJob(m.dataSource, { ownerId: 'a', priority: 5 });
      await createJob(m.dataSource, { ownerId: 'a' });
      await createJob(m.dataSource, { ownerId: 'a', due: false });
      const taken = await claim(2);
      expect(taken.sole).toBe(true);
      expect(taken.ownersPresent).toBe(1);
      expect(taken.jobs.map((j) => j.id)).toEqual([urgent.id, old.id]);
    });

    it('hands a second owner its turn in the same claim: one job of B behind 10 of A is claimed first of two', async () => {
      for (let i = 0; i < 10; i++) await createJob(m.dataSource, { ownerId: 'a' });
      const b = await createJob(m.dataSource, { ownerId: 'b' });
      const taken = await claim(2);
      expect(taken.sole).toBe(false);
      expect(taken.ownersPresent).toBe(2);
      expect(taken.jobs.map((j) => j.ownerId).sort()).toEqual(['a', 'b']);
      expect(taken.jobs.map((j) => j.id)).toContain(b.id);
    });

    it('sees an owner that waits for capacity beside one that does not', async () => {
      for (let i = 0; i < 3; i++) await createJob(m.dataSource, { ownerId: 'a' });
      const b = await createJob(m.dataSource, { ownerId: 'b', waitingFor: 'capped' });
      const taken = await claim(2, { providers: ['capped'], rooms: [1] });
      expect(taken.sole).toBe(false);
      expect(taken.jobs.map((j) => j.id)).toContain(b.id);
    });

    it('leaves an owner with a cap to the fair claim, which counts its jobs against the cap', async () => {
      await m.dataSource.query(`INSERT INTO owner_shares (owner_id, max_concurrency) VALUES ('a', 1)`);
      for (let i = 0; i < 3; i++) await createJob(m.dataSource, { ownerId: 'a' });
      const taken = await claim(3);
      expect(taken.sole).toBe(false);
      expect(taken.shares).toEqual([expect.objectContaining({ ownerId: 'a', capped: true })]);
    });

    it("counts a capped owner's calls in flight against its cap, not its jobs running", async () => {
      await m.dataSource.query(`INSERT INTO owner_shares (owner_id, max_concurrency) VALUES ('a', 3)`);
      // Between attempts (its first failed, a retry due): `running`, but no call. It must be claimable.
      const retrying = await createJob(m.dataSource, { ownerId: 'a' });
      await createAttempt(m.dataSource, retrying, { status: 'failed' });
      await m.dataSource.query(
        `UPDATE jobs SET status = 'running', next_attempt_at = now() - interval '1 hour' WHERE id = $1`,
        [retrying.id],
      );
      // Calls still followed until their hard deadline: an unknown attempt, and a cancelled job's cancelled one.
      await createAttempt(m.dataSource, await createJob(m.dataSource, { ownerId: 'a' }), {
        status: 'unknown',
        hardDeadlineInMs: 60_000,
      });
      await createAttempt(m.dataSource, await createJob(m.dataSource, { ownerId: 'a', status: 'cancelled' }), {
        status: 'cancelled',
        hardDeadlineInMs: 60_000,
      });
      // Unknown past its hard deadline (held for an operator): the worker gave its call up. Not counted.
      await createAttempt(m.dataSource, await createJob(m.dataSource, { ownerId: 'a' }), {
        status: 'unknown',
        hardDeadlineInMs: -1_000,
      });
      for (let i = 0; i < 3; i++) await createJob(m.dataSource, { ownerId: 'a' });
      // 3 - 2 calls in flight: room for one job, the retry (the oldest due).
      const taken = await claim(10);
      expect(taken.jobs.map((j) => j.id)).toEqual([retrying.id]);
    });

    it('gives a newcomer with a high weight at most FAIR_CREDIT of its own slots ahead of an owner of the same weight', async () => {
      // Both weight 100; A has been served (pass 50), B is new (pass 0). In pass units a credit of FAIR_CREDIT is
      // FAIR_CREDIT * 100 of B's slots; in slots, FAIR_CREDIT.
      await m.dataSource.query(
        `INSERT INTO owner_shares (owner_id, weight, pass) VALUES ('a', 100, 50), ('b', 100, 0)`,
      );
      for (let i = 0; i < 15; i++) {
        await createJob(m.dataSource, { ownerId: 'a' });
        await createJob(m.dataSource, { ownerId: 'b' });
      }
      const order: string[] = [];
      for (let i = 0; i < 8; i++) {
        await m.dataSource.transaction(async (tx) => {
          const taken = await jobs.claimDue(2, NO_WAITING, tx);
          // The charges Ledger.shareOut records, and the jobs taken out of the queue as a start would.
          await jobs.chargeOwners(
            taken.shares.map((x) => ({ owner_id: x.ownerId, start: x.start, inc: x.jobs / x.weight })),
            tx,
          );
          await tx.query(`UPDATE jobs SET next_attempt_at = NULL WHERE id = ANY($1)`, [taken.jobs.map((j) => j.id)]);
          order.push(...taken.jobs.map((j) => j.ownerId));
        });
      }
      // B's credit, then turns by tag: one more of B's on the tie that follows (the coin).
      expect(order.indexOf('a')).toBeGreaterThanOrEqual(0);
      expect(order.indexOf('a')).toBeLessThanOrEqual(FAIR_CREDIT + 1);
      expect(order.filter((o) => o === 'a').length).toBeGreaterThanOrEqual((order.length - FAIR_CREDIT) / 2 - 1);
    });

    it('locks nothing when nothing is due, and never hands one job to two concurrent claims', async () => {
      expect(await claim(4)).toEqual(expect.objectContaining({ jobs: [], sole: true, ownersPresent: 0 }));
      const due = await Promise.all(Array.from({ length: 10 }, () => createJob(m.dataSource, { ownerId: 'a' })));
      const [first, second] = await m.dataSource.transaction(async (tx1) => {
        const mine = (await jobs.claimDue(4, NO_WAITING, tx1, true)).jobs;
        const theirs = (await claim(10)).jobs;
        return [mine, theirs];
      });
      expect(first).toHaveLength(4);
      expect(second).toHaveLength(6);
      expect(new Set([...first, ...second].map((j) => j.id))).toEqual(new Set(due.map((j) => j.id)));
    });
  });
});
