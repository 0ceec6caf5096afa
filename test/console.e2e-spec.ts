import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type BrowserContext, type Page } from 'playwright-core';
import { bearer, startTestApp, type TestApp } from './helpers/app.js';
import { waitFor } from './helpers/wait.js';

/** Debian's chromium (`apt-get install chromium`; .ci/run installs it when missing), driven by playwright-core. */
const CHROMIUM = '/usr/bin/chromium';
/** Where the screenshots of each screen go (gitignored; docs/console.png is one of them, copied by hand). */
const SHOTS = 'test-output/console';

const browserFound = existsSync(CHROMIUM);
if (!browserFound) {
  process.stderr.write(
    `\n*** console.e2e-spec: NO BROWSER at ${CHROMIUM}: the console's browser test ${process.env.CI === 'true' ? 'FAILS (CI=true)' : 'is SKIPPED'}. ` +
      'Install it with: apt-get update && apt-get install -y chromium ***\n\n',
  );
}

describe('the console in a real browser', () => {
  if (!browserFound) {
    if (process.env.CI === 'true') it('needs a browser in CI', () => expect(`${CHROMIUM} exists`).toBe('a browser was found'));
    else it.skip(`needs ${CHROMIUM} (apt-get install -y chromium)`, () => undefined);
    return;
  }

  let t: TestApp;
  let browser: BrowserContext;
  let profile: string;
  let page: Page;
  const problems: string[] = [];

  beforeAll(async () => {
    mkdirSync(SHOTS, { recursive: true });
    t = await startTestApp({ role: 'all', workerPollMs: 10, reconcileIntervalMs: 100 });
    profile = mkdtempSync(join(tmpdir(), 'onejob-chromium-'));
    // A fresh profile per run: nothing carried over between runs (no cache, no storage).
    browser = await chromium.launchPersistentContext(profile, {
      executablePath: CHROMIUM,
      headless: true,
      args: [
        '--no-sandbox',
        '--disable-gpu',
        '--disable-quic',
        '--no-first-run',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
      ],
      viewport: { width: 1280, height: 800 },
    });
    page = browser.pages()[0] ?? (await browser.newPage());
    // A Content-Security-Policy violation or a script error is a console bug: collect them and fail at the end.
    page.on('console', (message) => message.type() === 'error' && !message.text().startsWith('Failed to load resource') && problems.push(message.text()));
    // API refusals are the console's to show; a missing asset is a bug.
    page.on('response', (response) => response.status() >= 400 && !response.url().includes('/v1/') && problems.push(`${response.status()} ${response.url()}`));
    page.on('pageerror', (error) => problems.push(error.message));
    page.on('request', (request) => {
      if (!request.url().startsWith(t.baseUrl)) problems.push(`request outside the service: ${request.url()}`);
    });
  }, 60_000);

  afterAll(async () => {
    await browser?.close();
    rmSync(profile, { recursive: true, force: true });
    await t?.close();
  });

  it('lets an operator find a hung attempt of another owner, resolve it, and watch the job succeed on its fallback', async () => {
    const admin = await t.key('admin', ['providers:certify']);
    const certified = await t.http().post('/v1/providers/sim-fallback/certifications').set(bearer(admin)).send({ operation: 'summarize' });
    expect(certified.body.passed).toBe(true);
    const alice = await t.key('alice', ['jobs:write', 'jobs:read']);
    const created = await t
      .http()
      .post('/v1/jobs')
      .set(bearer(alice))
      .set('Idempotency-Key', 'console-hang')
      .send({ operation: 'summarize', input: { text: 'hang, then fall back' }, providers: ['sim-hang', 'sim-fallback'] });
    expect(created.status).toBe(201);
    const jobId: string = created.body.id;
    await waitFor(async () => (await t.http().get(`/v1/jobs/${jobId}`).set(bearer(alice))).body.status, (s) => s === 'unknown');
    const operatorKey = await t.key('ops-team', ['ops:read', 'attempts:resolve']);

    // Log in by keyboard: the key goes into sessionStorage, never into the URL or a cookie.
    await page.goto(`${t.baseUrl}/console`);
    await page.getByLabel('API key').fill(operatorKey);
    await page.getByLabel('API key').press('Enter');
    const row = page.locator('#queue-table tbody tr', { has: page.locator(`a[href="#job/${jobId}"]`) });
    await row.waitFor();
    await expect(row.textContent()).resolves.toContain('alice');
    await expect(row.textContent()).resolves.toContain('sim-hang');
    expect(page.url()).not.toContain(operatorKey);
    await expect(page.evaluate('sessionStorage.getItem("onejob.apiKey")')).resolves.toBe(operatorKey);
    await expect(page.context().cookies()).resolves.toEqual([]);
    await page.screenshot({ path: `${SHOTS}/1-queue.png` });

    // Resolve it: cancelled (stop waiting), with a reason; submitted with Enter from the reason field.
    await row.locator('select').selectOption('cancelled');
    await row.getByLabel('Reason').fill('provider support: request never arrived');
    await row.getByLabel('Reason').press('Enter');
    await page.locator('#message.info').filter({ hasText: 'resolved as cancelled' }).waitFor();
    await page.locator('#queue-empty').waitFor();

    // The job by its idempotency key and owner: the fallback wins, the timeline shows both attempts.
    await page.getByRole('link', { name: 'Job', exact: true }).click();
    await page.getByLabel('Owner').fill('alice');
    await page.getByLabel('Idempotency key').fill('console-hang');
    await page.getByLabel('Idempotency key').press('Enter');
    await page.locator('#job-status', { hasText: 'succeeded' }).waitFor({ timeout: 15_000 });
    await page.locator('#job-events tbody tr', { hasText: 'sim-fallback' }).or(page.locator('#job-events tbody tr', { hasText: 'won' })).first().waitFor();
    const attempts = page.locator('#job-timeline .attempt');
    await expect(attempts.count()).resolves.toBe(2);
    await expect(attempts.nth(0).textContent()).resolves.toMatch(/#1 sim-hang · cancelled/);
    await expect(attempts.nth(1).textContent()).resolves.toMatch(/#2 sim-fallback · winner/);
    const resolution = page.locator('#job-events tbody tr', { hasText: 'resolved_by_operator' });
    await expect(resolution.textContent()).resolves.toContain('ops-team');
    await page.screenshot({ path: `${SHOTS}/2-job.png` });
    await page.screenshot({ path: `${SHOTS}/2-job-full.png`, fullPage: true });

    await page.getByRole('link', { name: 'Providers' }).click();
    const fallback = page.locator('#providers-table tbody tr', { hasText: 'sim-fallback' });
    await fallback.waitFor();
    await expect(fallback.locator('.cert-current').count()).resolves.toBeGreaterThanOrEqual(1);
    await expect(fallback.locator('.breaker').textContent()).resolves.toBe('closed');
    await page.screenshot({ path: `${SHOTS}/3-providers.png` });

    await page.getByRole('link', { name: 'Last hour' }).click();
    await page.locator('#chart-jobs canvas').waitFor();
    await page.locator('#chart-latency canvas').waitFor();
    await expect(page.locator('#activity-totals').textContent()).resolves.toMatch(/1 created, 1 succeeded/);
    await page.screenshot({ path: `${SHOTS}/4-activity.png` });

    const final = await t.http().get(`/v1/jobs/${jobId}`).set(bearer(alice));
    expect(final.body.attempts.map((a: { provider: string; status: string }) => [a.provider, a.status])).toEqual([
      ['sim-hang', 'cancelled'],
      ['sim-fallback', 'succeeded'],
    ]);
    expect(problems).toEqual([]);
  }, 60_000);

  it('serves the page with a strict Content-Security-Policy and answers a bad key with the API\'s own refusal', async () => {
    const res = await t.http().get('/console/');
    expect(res.status).toBe(200);
    expect(res.headers['content-security-policy']).toContain("default-src 'none'");
    expect((await t.http().get('/console/vendor/uPlot.iife.min.js')).status).toBe(200);
    await page.goto(`${t.baseUrl}/console/#queue`);
    await page.getByRole('button', { name: 'Forget key' }).click();
    await page.getByLabel('API key').fill('oj_not_a_key');
    await page.getByLabel('API key').press('Enter');
    await page.locator('#message', { hasText: 'unauthorized' }).waitFor();
  });
});
