import { MetricsService } from '../src/metrics/metrics.service.js';
import { Recertifier } from '../src/providers/recertifier.js';
import { FakeOpenAiServer } from './fakes/fake-openai.server.js';
import { bearer, startTestApp, type TestApp } from './helpers/app.js';
import { writeCatalog } from './helpers/catalog.js';
import { sleep, waitFor } from './helpers/wait.js';

// Certifications that stay true (docs/design.md#certifications-that-stay-true): a provider's golden cases re-run on
// schedule, and a failing run ends the certification at once (I6).

type CertificationBody = {
  operation: string;
  passed: boolean;
  certified: boolean;
  trigger: string;
  certifiedAt: string;
  nextRunAt: string | null;
};
type ProviderBody = { name: string; recertify: { everyHours: number | null }; certifications: CertificationBody[] };

describe('scheduled recertification', () => {
  let fake: FakeOpenAiServer;
  let t: TestApp;
  let key: string;

  beforeAll(async () => {
    process.env.FAKE_OPENAI_KEY = 'sk-fake';
    fake = await new FakeOpenAiServer().start();
    const catalogFile = writeCatalog((c) => {
      // The fallback: re-certified every second. The primary never answers, and fails over at 300 ms.
      c.providers.push({
        name: 'oa-fallback',
        kind: 'openai',
        model: 'gpt-4o-mini',
        baseUrl: fake.url,
        apiKeyEnv: 'FAKE_OPENAI_KEY',
        timeoutMs: 2000,
        recertify: { everyHours: 1 / 3600 },
        pricing: { inputPerMTok: 1, outputPerMTok: 2, currency: 'USD' },
      });
      c.providers.push({
        name: 'sim-stall',
        kind: 'simulated',
        model: 'stall',
        timeoutMs: 300,
        hardTimeoutMs: 600,
        onTimeout: 'failover',
        sideEffectFree: true,
        simulate: { outcome: 'timeout' },
      });
    });
    t = await startTestApp({
      role: 'all',
      catalogFile,
      workerConcurrency: 32,
      workerPollMs: 20,
      reconcileIntervalMs: 200,
      dbPoolSize: 20,
      webhookAllowedHosts: ['127.0.0.1:9'],
    });
    key = await t.key('owner-recert');
    // An operator who asked to hear when a provider loses its certification (delivery itself is webhooks' suite).
    const hook = await t
      .http()
      .post('/v1/webhooks')
      .set(bearer(key))
      .send({ url: 'http://127.0.0.1:9/hooks', events: ['provider.decertified'] });
    expect(hook.status).toBe(201);
  });
  afterAll(async () => {
    await t?.close();
    await fake?.stop();
  });

  const providers = async () => (await t.http().get('/v1/providers').set(bearer(key))).body as ProviderBody[];

  it('a decertified provider is never chosen for failover after the failing run commits, with workers claiming meanwhile', async () => {
    const certified = await t
      .http()
      .post('/v1/providers/oa-fallback/certifications')
      .set(bearer(key))
      .send({ operation: 'summarize' });
    expect(certified.body).toMatchObject({ passed: true, trigger: 'request' });
    const decertified = async () =>
      (await t.app.get(MetricsService).decertified.get()).values.reduce((n, v) => n + v.value, 0);
    const before = await decertified();

    // Jobs arrive all along; each primary stalls and fails over to oa-fallback while it is certified.
    let creating = true;
    let created = 0;
    const creator = (async () => {
      while (creating) {
        await t
          .http()
          .post('/v1/jobs')
          .set(bearer(key))
          .set('Idempotency-Key', `recert-${created++}`)
          .send({ operation: 'summarize', input: { text: `job ${created}` }, providers: ['sim-stall', 'oa-fallback'] });
        await sleep(40);
      }
    })();
    const onFallback = () =>
      t.dataSource.query(`SELECT count(*)::int AS n FROM attempts WHERE provider = 'oa-fallback'`);
    await waitFor(onFallback, ([{ n }]) => n >= 3, 15_000, 50);

    // The model changes behind its name: its answers break the contract, and the next scheduled run fails.
    fake.always({ kind: 'json', content: { notASummary: true } });
    const [{ visible }] = await waitFor(
      () =>
        t.dataSource.query(
          `SELECT clock_timestamp() AS visible FROM certifications WHERE provider = 'oa-fallback' AND NOT passed LIMIT 1`,
        ),
      (rows: Array<{ visible: Date }>) => rows.length > 0,
      15_000,
      10,
    );
    // Workers keep claiming, and primaries keep failing over (or holding), for two more seconds.
    const createdAtDecertification = created;
    await sleep(2000);
    creating = false;
    await creator;
    expect(created - createdAtDecertification).toBeGreaterThan(10);

    const [{ late }] = await t.dataSource.query(
      `SELECT count(*)::int AS late FROM attempts WHERE provider = 'oa-fallback' AND claimed_at > $1`,
      [visible],
    );
    expect(late).toBe(0);
    // The race was run: primaries of jobs created after the decertification timed out, and were held.
    const [{ held }] = await t.dataSource.query(
      `SELECT count(*)::int AS held FROM attempts a JOIN jobs j ON j.id = a.job_id
        WHERE a.provider = 'sim-stall' AND a.status = 'unknown' AND j.created_at > $1`,
      [visible],
    );
    expect(held).toBeGreaterThan(5);

    // Recorded with its report and cost, counted, and shown with the next run.
    const [failing] = await t.dataSource.query(
      `SELECT report FROM certifications WHERE provider = 'oa-fallback' AND NOT passed ORDER BY created_at LIMIT 1`,
    );
    expect(failing.report).toMatchObject({ passed: false, trigger: 'schedule', cost: { currency: 'USD' } });
    expect(failing.report.cases[0].errors.length).toBeGreaterThan(0);
    expect((await decertified()) - before).toBe(1);
    const announced = await t.dataSource.query(
      `SELECT job_id, payload FROM webhook_deliveries WHERE event_type = 'provider.decertified'`,
    );
    expect(announced).toHaveLength(1);
    expect(announced[0]).toMatchObject({
      job_id: null,
      payload: {
        type: 'provider.decertified',
        data: { provider: 'oa-fallback', operation: 'summarize', passed: false, trigger: 'schedule' },
      },
    });
    const shown = (await providers()).find((p) => p.name === 'oa-fallback')!;
    expect(shown.recertify).toEqual({ everyHours: 1 / 3600 });
    const [summarize] = shown.certifications.filter((c) => c.operation === 'summarize');
    expect(summarize).toMatchObject({ passed: false, certified: false, trigger: 'schedule' });
    expect(Date.parse(summarize.nextRunAt!)).toBeCloseTo(Date.parse(summarize.certifiedAt) + 1000, -1);
  }, 60_000);

  it('runs one replica at a time: two recertifiers ticking together run a due pair once', async () => {
    fake.always({ kind: 'json', content: { summary: 'fine again' } });
    const recertifier = t.app.get(Recertifier);
    // Make the pair due now, then tick twice at once (as two replicas would): the lock lets one run it.
    await t.dataSource.query(
      `UPDATE certifications SET created_at = created_at - interval '1 hour' WHERE provider = 'oa-fallback'`,
    );
    const [{ marker }] = await t.dataSource.query('SELECT clock_timestamp() AS marker');
    const runs = await Promise.all([recertifier.tick(), recertifier.tick()]);
    expect(runs.filter((n) => n > 0).length).toBeLessThanOrEqual(1);
    // This process's own timer ticks too: whoever held the lock, the due pair ran once (the next is a second away).
    const since = async () =>
      (
        await t.dataSource.query(
          `SELECT count(*)::int AS n FROM certifications WHERE provider = 'oa-fallback' AND operation = 'summarize' AND created_at > $1`,
          [marker],
        )
      )[0].n as number;
    await waitFor(since, (n) => n >= 1, 5000, 20);
    await sleep(300);
    expect(await since()).toBe(1);
  }, 30_000);
});
