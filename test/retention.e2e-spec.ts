import { RetentionRepository } from '../src/retention/retention.repository.js';
import { RetentionSweeper } from '../src/retention/retention-sweeper.js';
import { postJob } from './factories/index.js';
import { bearer, startTestApp, type TestApp } from './helpers/app.js';
import { provider, writeCatalog } from './helpers/catalog.js';
import { waitFor } from './helpers/wait.js';
import { startReceiver } from './helpers/webhook-receiver.js';

describe('retention: terminal jobs older than JOB_RETENTION_DAYS are purged with everything of theirs', () => {
  let t: TestApp;
  let key: string;
  let receiver: Awaited<ReturnType<typeof startReceiver>>;

  beforeAll(async () => {
    receiver = await startReceiver(() => 200);
    t = await startTestApp({
      role: 'all',
      workerPollMs: 10,
      reconcileIntervalMs: 100,
      jobRetentionDays: 30,
      retentionIntervalMs: 100,
      webhookAllowedHosts: [`127.0.0.1:${receiver.port}`],
      webhookPollMs: 20,
    });
    key = await t.key('owner-retention');
    const hook = await t
      .http()
      .post('/v1/webhooks')
      .set(bearer(key))
      .send({ url: receiver.url, events: ['job.succeeded', 'attempt.unknown'] });
    expect(hook.status).toBe(201);
  });
  afterAll(async () => {
    await t.close();
    await receiver.close();
  });

  const create = async (idempotencyKey: string, providers?: string[], status = 201) =>
    (await postJob(t, key, { idempotencyKey, providers, input: { text: 'retained?' } }, status)).id as string;
  const statusOf = async (id: string) =>
    (await t.dataSource.query('SELECT status FROM jobs WHERE id = $1', [id]))[0]?.status as string | undefined;
  const countsOf = async (id: string) =>
    (
      await t.dataSource.query(
        `SELECT (SELECT count(*) FROM jobs WHERE id = $1)::int AS jobs, (SELECT count(*) FROM attempts WHERE job_id = $1)::int AS attempts,
                (SELECT count(*) FROM job_events WHERE job_id = $1)::int AS events, (SELECT count(*) FROM webhook_deliveries WHERE job_id = $1)::int AS deliveries`,
        [id],
      )
    )[0];
  /** As if the job had been created and settled `days` ago (completed_at stays NULL for a live job). */
  const age = (id: string, days: number) =>
    t.dataSource.query(
      `UPDATE jobs SET created_at = now() - $2 * interval '1 day', completed_at = completed_at - $2 * interval '1 day' WHERE id = $1`,
      [id, days],
    );

  it('purges an old terminal job, keeps an unknown job of the same age and a recent one, and frees the old key', async () => {
    const old = await create('old-done');
    const stuck = await create('old-unknown', ['sim-hang']);
    const recent = await create('recent-done');
    await waitFor(
      () => statusOf(old),
      (s) => s === 'succeeded',
    );
    await waitFor(
      () => statusOf(recent),
      (s) => s === 'succeeded',
    );
    await waitFor(
      () => statusOf(stuck),
      (s) => s === 'unknown',
    );
    await waitFor(
      () => countsOf(old),
      (c) => c.deliveries === 1,
    );
    await waitFor(
      () => countsOf(stuck),
      (c) => c.deliveries === 1,
    );
    const stuckBefore = await countsOf(stuck);
    expect(stuckBefore).toMatchObject({ jobs: 1, attempts: 1, deliveries: 1 });

    await age(old, 31);
    await age(stuck, 31);
    await age(recent, 29);
    await waitFor(
      () => countsOf(old),
      (c) => c.jobs === 0,
      20_000,
    );
    expect(await countsOf(old)).toEqual({ jobs: 0, attempts: 0, events: 0, deliveries: 0 });
    expect(await countsOf(stuck)).toEqual(stuckBefore);
    expect(await statusOf(stuck)).toBe('unknown');
    expect((await countsOf(recent)).jobs).toBe(1);

    // The published key policy: bound to its intent while the job exists; after the purge, a new job.
    const again = await create('old-done');
    expect(again).not.toBe(old);
    // The recent job's key is still bound: same body replays, another body conflicts.
    expect(await create('recent-done', undefined, 200)).toBe(recent);
  });

  it('job_events stays append-only outside the purge', async () => {
    const kept = await create('kept');
    await waitFor(
      () => statusOf(kept),
      (s) => s === 'succeeded',
    );
    await expect(t.dataSource.query('DELETE FROM job_events WHERE job_id = $1', [kept])).rejects.toThrow(/append-only/);
    await expect(t.dataSource.query(`UPDATE job_events SET reason = 'x' WHERE job_id = $1`, [kept])).rejects.toThrow(
      /append-only/,
    );
    // Even inside the purge's setting, an UPDATE is refused.
    await expect(
      t.dataSource.transaction(async (m) => {
        await m.query(`SET LOCAL onejob.purge = 'on'`);
        await m.query(`UPDATE job_events SET reason = 'x' WHERE job_id = $1`, [kept]);
      }),
    ).rejects.toThrow(/append-only/);
  });
});

describe('retention batches', () => {
  it('purges at most the batch size per statement, oldest first, and nothing live', async () => {
    const api = await startTestApp({ role: 'api' }); // no sweeper running: the batches are ours alone
    try {
      const k = await api.key('owner-batches');
      const ids: string[] = [];
      for (let i = 0; i < 4; i++) {
        const res = await api
          .http()
          .post('/v1/jobs')
          .set(bearer(k))
          .set('Idempotency-Key', `b-${i}`)
          .send({ operation: 'summarize', input: { text: `b-${i}` } });
        ids.push(res.body.id);
      }
      for (const id of ids.slice(0, 3)) {
        expect((await api.http().post(`/v1/jobs/${id}/cancel`).set(bearer(k))).status).toBe(200);
      }
      // Three cancelled jobs and one pending, all created 40 days ago.
      await api.dataSource.query(
        `UPDATE jobs SET created_at = created_at - interval '40 days', completed_at = completed_at - interval '40 days' WHERE id = ANY($1)`,
        [ids],
      );
      const retention = api.app.get(RetentionRepository);
      expect((await retention.purgeBatch(30, 2)).jobs).toBe(2);
      expect((await retention.purgeBatch(30, 2)).jobs).toBe(1);
      expect((await retention.purgeBatch(30, 2)).jobs).toBe(0);
      const left = await api.dataSource.query('SELECT id, status FROM jobs');
      expect(left).toEqual([{ id: ids[3], status: 'pending' }]);
    } finally {
      await api.close();
    }
  });
});

describe('retention keeps what was spent: a purge refunds no budget', () => {
  it("leaves the month's spend, /v1/usage and the budget's refusal as they were once the jobs that spent it are purged", async () => {
    // About 5.5 USD a job (its tokens at 0.1 USD each): six jobs pass a budget of 30 USD, within one worst case.
    const pricing = { inputPerMTok: 100_000, outputPerMTok: 100_000, currency: 'USD' };
    const catalogFile = writeCatalog((c) => (provider(c, 'sim-primary').pricing = pricing));
    const t = await startTestApp({
      role: 'all',
      catalogFile,
      workerPollMs: 10,
      reconcileIntervalMs: 100,
      jobRetentionDays: 1,
      retentionIntervalMs: 3_600_000, // the test purges itself, once
    });
    try {
      const key = await t.key('team-b');
      expect(
        (await t.http().put('/v1/budget').set(bearer(key)).send({ monthlyLimit: 30, currency: 'USD' })).status,
      ).toBe(200);
      const post = (n: number) =>
        t
          .http()
          .post('/v1/jobs')
          .set(bearer(key))
          .set('Idempotency-Key', `spend-${n}`)
          .send({ operation: 'summarize', input: { text: `spend ${n}` }, providers: ['sim-primary'] });
      let created = 0;
      for (;;) {
        const res = await post(created);
        if (res.status === 429) break;
        expect(res.status).toBe(201);
        created++;
        await waitFor(
          async () => (await t.http().get(`/v1/jobs/${res.body.id}`).set(bearer(key))).body.status,
          (status) => status === 'succeeded',
        );
        expect(created).toBeLessThan(20);
      }
      expect(created).toBeGreaterThan(1);
      const budget = async () => (await t.http().get('/v1/budget').set(bearer(key))).body;
      const usage = async (groupBy: string) =>
        (await t.http().get('/v1/usage').query({ groupBy }).set(bearer(key))).body.groups;
      const spent = (await budget()).spent;
      expect(spent).toBeGreaterThanOrEqual(30 - 10);
      const usageBefore = {
        day: await usage('day'),
        provider: await usage('provider'),
        operation: await usage('operation'),
      };

      // Settled three days ago (their attempts still started this month), past JOB_RETENTION_DAYS=1: purged.
      await t.dataSource.query(
        `UPDATE jobs SET completed_at = completed_at - interval '3 days' WHERE owner_id = 'team-b'`,
      );
      expect(await t.app.get(RetentionSweeper).sweep(1)).toBe(created);
      expect((await t.dataSource.query(`SELECT count(*)::int AS n FROM jobs WHERE owner_id = 'team-b'`))[0].n).toBe(0);

      expect(await budget()).toMatchObject({ spent, reserved: 0 });
      expect({
        day: await usage('day'),
        provider: await usage('provider'),
        operation: await usage('operation'),
      }).toEqual(usageBefore);
      const refused = await post(100);
      expect(refused.status).toBe(429);
      expect(refused.body.code).toBe('budget_exceeded');
      const batch = await t
        .http()
        .post('/v1/batches')
        .set(bearer(key))
        .set('Idempotency-Key', 'spend-batch')
        .send({
          items: [{ key: 'spend-b1', operation: 'summarize', input: { text: 'b' }, providers: ['sim-primary'] }],
        });
      expect(batch.status).toBe(429);
      expect(batch.body.code).toBe('budget_exceeded');
    } finally {
      await t.close();
    }
  });
});
