import { fingerprintOf } from '../../src/common/fingerprint.js';
import { type FairClaim, JobsRepository, type NewJob } from '../../src/ledger/jobs.repository.js';
import { createJob } from '../factories/index.js';
import { type MigratedDatabase, migratedDatabase } from './database.js';

const NO_WAITING = { providers: [], rooms: [] };

/** Jobs with a schedule whose queue and owner have no row due by then: a claim would never find them. */
const UNCOVERED = `SELECT count(*)::int AS n FROM jobs j
  WHERE j.next_attempt_at IS NOT NULL AND j.status IN ('pending', 'running', 'unknown')
    AND NOT EXISTS (SELECT 1 FROM owner_queue q WHERE q.queue = COALESCE(j.waiting_for, '') AND q.owner_id = j.owner_id
                      AND q.due_at <= j.next_attempt_at)`;

/**
 * The owner queue (docs/design.md#fair-share) on a real PostgreSQL, no app: the claim reads owners from it, so a job
 * whose owner has no row there would never be claimed. The triggers on jobs write the rows; the tidy after a claim
 * removes the empty ones; these races are between the two.
 */
describe('the owner queue (real PostgreSQL, no app)', () => {
  let m: MigratedDatabase;
  let jobs: JobsRepository;

  beforeAll(async () => {
    m = await migratedDatabase(16);
    jobs = new JobsRepository(m.dataSource);
  });
  afterAll(() => m.close());
  beforeEach(() => m.truncate());

  let seq = 0;
  const intent = (ownerId: string): NewJob => ({
    ownerId,
    idempotencyKey: `k-${++seq}`,
    operation: 'summarize',
    input: { text: `t-${seq}` },
    providers: ['sim-primary'],
    fingerprint: fingerprintOf({ operation: 'summarize', input: { text: `t-${seq}` } }),
  });
  const count = async (sql: string) => (await m.dataSource.query(sql))[0].n as number;

  /** A worker's claim as AttemptWorker.claimBatch makes it: claim, charge, take the jobs out of the queue, commit, tidy. */
  const claimOnce = async (limit: number): Promise<FairClaim> => {
    const claim = await m.dataSource.transaction(async (tx) => {
      const taken = await jobs.claimDue(limit, NO_WAITING, tx);
      if (taken.ownersPresent > 1) {
        await jobs.chargeOwners(
          taken.shares.map((s) => ({ owner_id: s.ownerId, start: s.start, inc: s.jobs / s.weight })),
          tx,
          taken.held,
        );
      }
      await tx.query(`UPDATE jobs SET status = 'running', next_attempt_at = NULL WHERE id = ANY($1)`, [
        taken.jobs.map((j) => j.id),
      ]);
      return taken;
    });
    await jobs.tidyOwnerQueue(claim.tidy, m.dataSource.manager);
    return claim;
  };

  it('leaves no due job without its row while creates, claims with their tidies, and retries race: every job is claimed', async () => {
    const owners = Array.from({ length: 40 }, (_, i) => `o${i}`);
    const until = Date.now() + 4_000;
    const claimed = new Map<string, number>();
    let created = 0;
    let retried = 0;
    const pick = () => owners[Math.floor(Math.random() * owners.length)];
    const creator = async () => {
      while (Date.now() < until) {
        await jobs.insertJob(intent(pick()));
        created++;
      }
    };
    // A create whose transaction stays open after its insert (a batch's, a budgeted one's more statements): the
    // window in which a tidy that did not wait for it would see its owner empty.
    const slowCreator = async () => {
      while (Date.now() < until) {
        await m.dataSource.transaction(async (tx) => {
          await jobs.insertJob(intent(pick()), tx);
          await new Promise((r) => setTimeout(r, 15));
        });
        created++;
      }
    };
    const claimer = async (stopWhenIdle: boolean) => {
      let idle = 0;
      while (stopWhenIdle ? idle < 20 : Date.now() < until) {
        const claim = await claimOnce(8);
        for (const job of claim.jobs) claimed.set(job.id, (claimed.get(job.id) ?? 0) + 1);
        idle = claim.jobs.length ? 0 : idle + 1;
        if (!claim.jobs.length) await new Promise((r) => setTimeout(r, 10));
      }
    };
    // A settlement that schedules a retry: running, no schedule, then due again a moment later (the trigger's
    // `later` row), as UPDATE_BOOKKEEPING does.
    const retrier = async () => {
      while (Date.now() < until) {
        const rows: Array<{ id: string }> = await m.dataSource.query(
          `WITH u AS (
             UPDATE jobs SET status = 'pending', next_attempt_at = now() + interval '30 milliseconds'
              WHERE id IN (SELECT id FROM jobs WHERE status = 'running' AND next_attempt_at IS NULL
                            ORDER BY random() LIMIT 3 FOR UPDATE SKIP LOCKED) RETURNING id
           ) SELECT id FROM u`,
        );
        retried += rows.length;
        await new Promise((r) => setTimeout(r, 20));
      }
    };
    await Promise.all([
      creator(),
      creator(),
      slowCreator(),
      slowCreator(),
      claimer(false),
      claimer(false),
      claimer(false),
      retrier(),
    ]);
    expect(await count(UNCOVERED)).toBe(0);
    await Promise.all([claimer(true), claimer(true)]);

    const left = await count(`SELECT count(*)::int AS n FROM jobs WHERE next_attempt_at IS NOT NULL`);
    expect({ created, retried, left, uncovered: await count(UNCOVERED) }).toMatchObject({ left: 0, uncovered: 0 });
    expect(await count(`SELECT count(*)::int AS n FROM jobs`)).toBe(created);
    expect(claimed.size).toBe(created);
    expect([...claimed.values()].reduce((a, b) => a + b, 0)).toBe(created + retried);
    // What was found empty was tidied away: the queue holds nothing once nothing is scheduled.
    expect(await count(`SELECT count(*)::int AS n FROM owner_queue`)).toBeLessThanOrEqual(1);
  }, 60_000);

  it('queues the owners of one statement that makes 40,000 owners due at once, with no lock per owner held', async () => {
    // A bulk write (a migration's backfill, an operator's UPDATE, a provider's waiting jobs released) touches many
    // owners in one transaction: a lock per owner until commit would run out of PostgreSQL's shared lock table.
    const held = await m.dataSource.transaction(async (tx) => {
      await tx.query(
        `INSERT INTO jobs (owner_id, idempotency_key, fingerprint, operation, input, providers, next_attempt_at)
         SELECT 'bulk-' || i, 'k-' || i, repeat('f', 64), 'summarize', '{}'::jsonb, '{sim-primary}', now()
           FROM generate_series(1, 40000) i`,
      );
      return (await tx.query(`SELECT count(*)::int AS n FROM pg_locks WHERE pid = pg_backend_pid()`))[0].n as number;
    });
    // Its relations' locks and its own transaction id's, a few dozen; none per owner.
    expect(held).toBeLessThan(100);
    expect(await count(`SELECT count(*)::int AS n FROM owner_queue`)).toBe(40_000);
    expect(await count(UNCOVERED)).toBe(0);
  });

  it('gives three concurrent claims different owners: 30 owners with one due job each fill three windows of 10', async () => {
    for (let i = 0; i < 30; i++) await createJob(m.dataSource, { ownerId: `p${String(i).padStart(2, '0')}` });
    const runners = Array.from({ length: 3 }, () => m.dataSource.createQueryRunner());
    try {
      for (const r of runners) await r.startTransaction();
      const claims = [];
      for (const r of runners) claims.push(await jobs.claimDue(10, NO_WAITING, r.manager));
      const ids = claims.flatMap((c) => c.jobs.map((j) => j.id));
      expect(claims.map((c) => c.jobs.length)).toEqual([10, 10, 10]);
      expect(new Set(ids).size).toBe(30);
    } finally {
      for (const r of runners) {
        await r.rollbackTransaction();
        await r.release();
      }
    }
  });

  it("finds an owner's retry when it falls due after the owner's rows were tidied away", async () => {
    const job = await createJob(m.dataSource, { ownerId: 'r' });
    await createJob(m.dataSource, { ownerId: 's' });
    expect((await claimOnce(10)).jobs).toHaveLength(2);
    expect(await count(`SELECT count(*)::int AS n FROM owner_queue`)).toBe(0);
    await m.dataSource.query(
      `UPDATE jobs SET status = 'pending', next_attempt_at = now() + interval '300 milliseconds' WHERE id = $1`,
      [job.id],
    );
    expect((await claimOnce(10)).jobs).toHaveLength(0);
    await new Promise((r) => setTimeout(r, 350));
    expect((await claimOnce(10)).jobs.map((j) => j.id)).toEqual([job.id]);
  });

  it('keeps a row for a schedule moved later, which fires no trigger: the tidy finds its next due time', async () => {
    const a = await createJob(m.dataSource, { ownerId: 'd' });
    const b = await createJob(m.dataSource, { ownerId: 'e' });
    // A deferral on the queue it is already in: next_attempt_at moves later, the `now` row alone covers it.
    await m.dataSource.query(`UPDATE jobs SET next_attempt_at = now() + interval '300 milliseconds' WHERE id = $1`, [
      a.id,
    ]);
    expect((await claimOnce(10)).jobs.map((j) => j.id)).toEqual([b.id]);
    expect(await count(UNCOVERED)).toBe(0);
    await new Promise((r) => setTimeout(r, 350));
    expect((await claimOnce(10)).jobs.map((j) => j.id)).toEqual([a.id]);
  });
});
