import { randomUUID } from 'node:crypto';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { type BrowserContext, chromium, type Page } from 'playwright-core';

import { bearer, startTestApp, type TestApp } from './helpers/app.js';
import { writeCatalog } from './helpers/catalog.js';
import { startTcpProxy, type TcpProxy } from './helpers/tcp-proxy.js';
import { waitFor } from './helpers/wait.js';

/** Debian's chromium, as test/console.e2e-spec.ts drives it. */
const CHROMIUM = '/usr/bin/chromium';
const browserFound = existsSync(CHROMIUM);

describe("live streams in Chromium: its EventSource, and the console's live timeline", () => {
  if (!browserFound) {
    const needed = () => expect(`${CHROMIUM} exists`).toBe('a browser was found');
    if (process.env.CI === 'true') it('needs a browser in CI', needed);
    else it.skip(`needs ${CHROMIUM} (apt-get install -y chromium)`, () => undefined);
    return;
  }

  let t: TestApp;
  let proxy: TcpProxy;
  let browser: BrowserContext;
  let profile: string;
  let page: Page;
  let owner: string;

  beforeAll(async () => {
    const catalogFile = writeCatalog((c) => {
      const simulate = { latencyMs: 1500, outcome: 'success' };
      c.providers.push({ name: 'sim-slow', kind: 'simulated', model: 'sim-s', timeoutMs: 5000, simulate });
      c.operations[0].providers = ['sim-slow'];
    });
    t = await startTestApp({ role: 'all', catalogFile, workerPollMs: 20, streamGraceMs: 300 });
    proxy = await startTcpProxy('127.0.0.1', Number(new URL(t.baseUrl).port));
    owner = await t.key('owner-browser', ['jobs:write', 'jobs:read', 'ops:read']);
    profile = mkdtempSync(join(tmpdir(), 'onejob-chromium-'));
    browser = await chromium.launchPersistentContext(profile, {
      executablePath: CHROMIUM,
      headless: true,
      args: ['--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking', '--disable-sync'],
    });
    page = browser.pages()[0] ?? (await browser.newPage());
  }, 60_000);

  afterAll(async () => {
    await browser?.close();
    if (profile) rmSync(profile, { recursive: true, force: true });
    await proxy?.close();
    await t?.close();
  });

  async function createJob(): Promise<string> {
    const res = await t
      .http()
      .post('/v1/jobs')
      .set(bearer(owner))
      .set('Idempotency-Key', randomUUID())
      .send({ operation: 'summarize', input: { text: 'watch me' } })
      .expect(201);
    return res.body.id as string;
  }

  async function timeline(jobId: string): Promise<string[]> {
    const res = await t.http().get(`/v1/jobs/${jobId}/events?limit=500`).set(bearer(owner)).expect(200);
    return (res.body as { items: Array<{ id: string }> }).items.map((e) => e.id);
  }

  it("Chromium's EventSource gets every event once, in order, across a dropped connection", async () => {
    const jobId = await createJob();
    // EventSource sends no Authorization header: the test adds the key on its way out (the console reads with fetch).
    // (Not on a stream-token URL, as the console's: a second credential beside the token is refused.)
    await page.route('**/v1/jobs/*/events', (route) =>
      route.request().url().includes('access_token=')
        ? route.continue()
        : route.continue({ headers: { ...route.request().headers(), authorization: `Bearer ${owner}` } }),
    );
    // Playwright does not show the Last-Event-ID that Chromium's network stack adds: what proves the resume is that
    // the connection after the cut repeats nothing (without the header, it would send the timeline from its start).
    const connections: string[] = [];
    const ours = (url: string) => url.includes(`/v1/jobs/${jobId}/events`);
    page.on('request', (request) => ours(request.url()) && connections.push('sent'));
    page.on('requestfailed', (request) => ours(request.url()) && connections.push('cut'));
    // A page of the service, reached through the proxy: the stream is same-origin, and the proxy can cut it.
    await page.goto(`http://127.0.0.1:${proxy.port}/console/`);
    await page.evaluate((url) => {
      const w = globalThis as unknown as { got: string[]; source: EventSource };
      w.got = [];
      const source = new EventSource(url);
      w.source = source;
      const kinds = ['pending', 'running', 'unknown', 'succeeded', 'failed', 'cancelled', 'starting'];
      for (const kind of kinds.flatMap((to) => [`job.${to}`, `attempt.${to}`])) {
        source.addEventListener(kind, (event) => w.got.push((event as MessageEvent).lastEventId));
      }
    }, `/v1/jobs/${jobId}/events`);
    const got = () => page.evaluate(() => (globalThis as unknown as { got: string[] }).got);
    await waitFor(got, (ids) => ids.length >= 2);
    await proxy.cut();
    await proxy.restore();
    // It ends by itself: the stream closes after the job, the reconnect hears 204 and EventSource stops.
    const readyState = () => page.evaluate(() => (globalThis as unknown as { source: EventSource }).source.readyState);
    await waitFor(readyState, (state) => state === 2, 20_000);
    const ids = await got();
    expect(ids).toEqual(await timeline(jobId));
    // The first connection was cut mid-job, a second streamed the rest, a third heard 204.
    expect(connections.slice(0, 3)).toEqual(['sent', 'cut', 'sent']);
    expect(connections.filter((c) => c === 'sent').length).toBeGreaterThanOrEqual(3);
    expect(new Set(ids).size).toBe(ids.length);
    await page.unrouteAll();
  }, 40_000);

  it("the console follows a live job's timeline as it commits, without polling its pages", async () => {
    const jobId = await createJob();
    const pages: string[] = [];
    const streams: string[] = [];
    page.on('request', (request) => {
      if (!request.url().includes(`/v1/jobs/${jobId}/events`)) return;
      (request.headers().accept === 'text/event-stream' ? streams : pages).push(request.url());
    });
    await page.goto(`${t.baseUrl}/console/`);
    await page.getByLabel('API key').fill(owner);
    await page.getByLabel('API key').press('Enter');
    await page.goto(`${t.baseUrl}/console/#job/${jobId}`);
    await page.locator('#job-status', { hasText: 'succeeded' }).waitFor({ timeout: 20_000 });
    const all = await timeline(jobId);
    await waitFor(
      () => page.locator('#job-events tbody tr').count(),
      (n) => n === all.length,
    );
    // One read of the pages when the job was opened; the rest came over the stream.
    expect(pages).toHaveLength(1);
    expect(streams.length).toBeGreaterThanOrEqual(1);
  }, 40_000);
});
