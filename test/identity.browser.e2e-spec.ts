import { randomUUID } from 'node:crypto';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { type BrowserContext, chromium, type Page } from 'playwright-core';

import { writeCatalog } from './helpers/catalog.js';
import { createTestDatabase, type TestDatabase } from './helpers/database.js';
import { TestIdentityProvider, writeIssuers } from './helpers/identity-provider.js';
import { type ServiceProcess, spawnService, waitUntilReady } from './helpers/process.js';
import { sleep, waitFor } from './helpers/wait.js';
import { createKey } from './race/target.js';

/** Debian's chromium, as test/console.e2e-spec.ts drives it. */
const CHROMIUM = '/usr/bin/chromium';
const browserFound = existsSync(CHROMIUM);
const TTL_SECONDS = 6;

type Listener = { got: string[]; source?: EventSource };

describe("stream tokens in Chromium's EventSource, and the console signed in with the company's IdP (I15)", () => {
  if (!browserFound) {
    const needed = () => expect(`${CHROMIUM} exists`).toBe('a browser was found');
    if (process.env.CI === 'true') it('needs a browser in CI', needed);
    else it.skip(`needs ${CHROMIUM} (apt-get install -y chromium)`, () => undefined);
    return;
  }

  let idp: TestIdentityProvider;
  let db: TestDatabase;
  let service: ServiceProcess;
  let browser: BrowserContext;
  let profile: string;
  let page: Page;
  let owner: string;
  const problems: string[] = [];
  const tokens: string[] = [];

  beforeAll(async () => {
    idp = await new TestIdentityProvider().start();
    await idp.addKey('RS256');
    idp.claimsForLogin = () => ({ sub: 'carol', azp: 'ops-team', preferred_username: 'carol', groups: ['operators'] });
    const authIssuersFile = writeIssuers([
      {
        issuer: idp.issuer,
        audience: 'onejob',
        owner: { claim: 'azp' },
        scopes: { claim: 'groups', map: { operators: ['ops:read', 'attempts:resolve', 'jobs:read'] } },
        console: { clientId: 'onejob-console', scope: 'openid profile' },
      },
    ]);
    const catalogFile = writeCatalog((c) => {
      const simulate = { latencyMs: 1500, outcome: 'success' };
      c.providers.push({ name: 'sim-slow', kind: 'simulated', model: 'sim-s', timeoutMs: 5000, simulate });
      c.operations[0].providers = ['sim-slow'];
    });
    db = await createTestDatabase();
    service = await spawnService({
      DATABASE_URL: db.url,
      CATALOG_FILE: catalogFile,
      AUTH_ISSUERS_FILE: authIssuersFile,
      ROLE: 'all',
      // Every line the service writes, debug included, is read for a token below.
      LOG_LEVEL: 'debug',
      WORKER_POLL_MS: '20',
      STREAM_GRACE_MS: '300',
      STREAM_TOKEN_TTL_SECONDS: String(TTL_SECONDS),
    });
    await waitUntilReady(service);
    owner = createKey(db.url, 'owner-browser', 'jobs:write,jobs:read');
    profile = mkdtempSync(join(tmpdir(), 'onejob-chromium-'));
    browser = await chromium.launchPersistentContext(profile, {
      executablePath: CHROMIUM,
      headless: true,
      args: ['--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking', '--disable-sync'],
    });
    page = browser.pages()[0] ?? (await browser.newPage());
    page.on(
      'console',
      (m) => m.type() === 'error' && !m.text().startsWith('Failed to load resource') && problems.push(m.text()),
    );
    page.on('pageerror', (error) => problems.push(error.message));
  }, 60_000);

  afterAll(async () => {
    await browser?.close();
    if (profile) rmSync(profile, { recursive: true, force: true });
    service?.kill('SIGTERM');
    await service?.exited;
    await db?.drop();
    await idp?.stop();
  });

  const api = (path: string, init: RequestInit = {}, key = owner) =>
    fetch(`${service.baseUrl}${path}`, {
      ...init,
      headers: {
        Authorization: `Bearer ${key}`,
        ...(init.body === undefined ? {} : { 'Content-Type': 'application/json' }),
        ...init.headers,
      },
    });

  async function createJob(): Promise<string> {
    const res = await api('/v1/jobs', {
      method: 'POST',
      headers: { 'Idempotency-Key': randomUUID() },
      body: JSON.stringify({ operation: 'summarize', input: { text: 'follow me' } }),
    });
    expect(res.status).toBe(201);
    return ((await res.json()) as { id: string }).id;
  }

  async function mint(jobId: string): Promise<{ token: string; url: string }> {
    const res = await api(`/v1/jobs/${jobId}/stream-tokens`, { method: 'POST' });
    expect(res.status).toBe(201);
    const body = (await res.json()) as { token: string; url: string };
    tokens.push(body.token);
    return body;
  }

  const timeline = async (jobId: string) =>
    ((await (await api(`/v1/jobs/${jobId}/events?limit=500`)).json()) as { items: Array<{ id: string }> }).items.map(
      (e) => e.id,
    );

  /** Opens an EventSource in the page; its ids arrive in `window.listeners[name].got`. */
  const listen = (name: string, url: string) =>
    page.evaluate(
      ([name, url]) => {
        const w = globalThis as unknown as { listeners: Record<string, Listener> };
        w.listeners ??= {};
        const listener: Listener = { got: [] };
        const source = new EventSource(url);
        listener.source = source;
        for (const to of ['pending', 'running', 'succeeded', 'failed', 'unknown', 'cancelled', 'starting']) {
          for (const subject of ['job', 'attempt']) {
            source.addEventListener(`${subject}.${to}`, (event) =>
              listener.got.push((event as MessageEvent).lastEventId),
            );
          }
        }
        w.listeners[name] = listener;
      },
      [name, url],
    );
  const state = (name: string) =>
    page.evaluate((name) => {
      const listener = (globalThis as unknown as { listeners: Record<string, Listener> }).listeners[name];
      return { got: listener.got, readyState: listener.source!.readyState };
    }, name);

  it("a stream token opens its own job's stream in EventSource, and nothing after its expiry or elsewhere", async () => {
    const jobId = await createJob();
    const other = await createJob();
    const minted = await mint(jobId);
    await page.goto(`${service.baseUrl}/console/`);
    await listen('own', minted.url);
    await listen('other', `/v1/jobs/${other}/events?access_token=${minted.token}`);
    // It ends by itself: the service closes the stream after the job, the reconnect (same URL, Last-Event-ID) hears
    // 204 and EventSource stops.
    const own = await waitFor(
      () => state('own'),
      (s) => s.readyState === 2,
      20_000,
    );
    expect(own.got).toEqual(await timeline(jobId));
    const refused = await state('other');
    expect(refused).toEqual({ got: [], readyState: 2 });
    // Past its expiry the same URL opens nothing.
    await sleep(TTL_SECONDS * 1000 + 200);
    await listen('late', minted.url);
    expect(
      await waitFor(
        () => state('late'),
        (s) => s.readyState === 2,
      ),
    ).toEqual({ got: [], readyState: 2 });
    const late = await fetch(`${service.baseUrl}${minted.url}`, { headers: { Accept: 'text/event-stream' } });
    expect(late.status).toBe(401);
    expect(((await late.json()) as { code: string }).code).toBe('token_expired');
  }, 60_000);

  it('the console signs in with the IdP (code + PKCE), keeps the token in memory only, and follows a job live', async () => {
    const jobId = await createJob();
    const streams: string[] = [];
    page.on('request', (request) => {
      if (request.url().includes(`/v1/jobs/${jobId}/events?access_token=`)) streams.push(request.headers().accept);
    });
    const tokenExchanges: string[] = [];
    page.on('request', (request) => request.url() === `${idp.url}/token` && tokenExchanges.push(request.method()));
    await page.goto(`${service.baseUrl}/console/`);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.locator('#key-status', { hasText: 'Signed in as carol' }).waitFor({ timeout: 10_000 });
    expect(tokenExchanges).toEqual(['POST']);
    // The code left the address bar; nothing of the sign-in stays in storage.
    expect(new URL(page.url()).search).toBe('');
    const stored = await page.evaluate('JSON.stringify({ ...sessionStorage, ...localStorage })');
    expect(stored).toBe('{}');
    // The same page (the token lives in it): open the job, watch it run to the end over EventSource.
    await page.evaluate(`location.hash = '#job/${jobId}'`);
    await page.locator('#job-status', { hasText: 'succeeded' }).waitFor({ timeout: 20_000 });
    const all = await timeline(jobId);
    await waitFor(
      () => page.locator('#job-events tbody tr').count(),
      (n) => n === all.length,
    );
    expect(streams.length).toBeGreaterThanOrEqual(1);
    expect(streams.every((accept) => accept === 'text/event-stream')).toBe(true);
    expect(problems).toEqual([]);
  }, 60_000);

  it('never writes a stream token to a log line', async () => {
    const output = service.output();
    // The service did log the stream requests (one line per request), only never with their query.
    expect(output).toMatch(/"route":"\/v1\/jobs\/:id\/events"/);
    expect(tokens.length).toBeGreaterThan(0);
    for (const token of tokens) expect(output).not.toContain(token);
    // Nor the console's own (made in the page), nor the key or the IdP's token.
    expect(output).not.toMatch(/ojs_[A-Za-z0-9_-]{43}/);
    expect(output).not.toContain(owner);
    expect(output).not.toMatch(/eyJ[A-Za-z0-9_-]{10,}\./);
  });
});
