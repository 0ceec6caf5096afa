import { randomUUID } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { type BrowserContext, chromium, type Page } from 'playwright-core';

import { bearer, startTestApp, type TestApp } from './helpers/app.js';
import { writeCatalog } from './helpers/catalog.js';
import { waitFor } from './helpers/wait.js';

/** Debian's chromium (`apt-get install chromium`; .ci/run installs it when missing), driven by playwright-core. */
const CHROMIUM = '/usr/bin/chromium';
/** Where the screenshots of each screen go (gitignored; docs/console.png is one of them, copied by hand). */
const SHOTS = 'test-output/console';

/** The console's one time format: 24 h, UTC, said so (the page's own rendering, to compare against the API). */
const utc = (iso: string) => `${new Date(iso).toISOString().slice(11, 19)} UTC`;
/** The console's durations. */
const ms = (value: number) => (value < 1000 ? `${Math.round(value)} ms` : `${(value / 1000).toFixed(1)} s`);
/** A time written the other way: 12 h (with am/pm) or a locale's date (1/12/2026, 12/1/2026). */
const OTHER_TIME_FORMAT = /\d\s?(am|pm|AM|PM)\b|\d{1,2}\/\d{1,2}\/\d{4}/;

interface ApiEvent {
  at: string;
  attemptId: string | null;
  reason: string;
  to: string;
}

const browserFound = existsSync(CHROMIUM);
if (!browserFound) {
  process.stderr.write(
    `\n*** console.e2e-spec: NO BROWSER at ${CHROMIUM}: the console's browser test ${process.env.CI === 'true' ? 'FAILS (CI=true)' : 'is SKIPPED'}. ` +
      'Install it with: apt-get update && apt-get install -y chromium ***\n\n',
  );
}

describe('the console in a real browser', () => {
  if (!browserFound) {
    if (process.env.CI === 'true') {
      it('needs a browser in CI', () => expect(`${CHROMIUM} exists`).toBe('a browser was found'));
    } else it.skip(`needs ${CHROMIUM} (apt-get install -y chromium)`, () => undefined);
    return;
  }

  let t: TestApp;
  let browser: BrowserContext;
  let profile: string;
  let page: Page;
  const problems: string[] = [];

  beforeAll(async () => {
    mkdirSync(SHOTS, { recursive: true });
    // sim-late answers after its deadline: failover gives up on it, the fallback wins, and its result arrives late.
    const catalogFile = writeCatalog((c) =>
      c.providers.push({
        name: 'sim-late',
        kind: 'simulated',
        model: 'sim-9',
        timeoutMs: 300,
        hardTimeoutMs: 5000,
        onTimeout: 'failover',
        sideEffectFree: true,
        simulate: { latencyMs: 1500, outcome: 'success' },
      }),
    );
    t = await startTestApp({ role: 'all', catalogFile, workerPollMs: 10, reconcileIntervalMs: 100 });
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
    page.on(
      'console',
      (message) =>
        message.type() === 'error' &&
        !message.text().startsWith('Failed to load resource') &&
        problems.push(message.text()),
    );
    // API refusals are the console's to show; a missing asset is a bug.
    page.on(
      'response',
      (response) =>
        response.status() >= 400 &&
        !response.url().includes('/v1/') &&
        problems.push(`${response.status()} ${response.url()}`),
    );
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

  /** A job whose first attempt hangs on sim-hang until it is unknown; its id and that attempt's. */
  async function hungJob(ownerKey: string, idempotencyKey: string, providers: string[]) {
    const created = await t
      .http()
      .post('/v1/jobs')
      .set(bearer(ownerKey))
      .set('Idempotency-Key', idempotencyKey)
      .send({ operation: 'summarize', input: { text: 'hang, then fall back' }, providers });
    expect(created.status).toBe(201);
    const jobId: string = created.body.id;
    const job = await waitFor(
      async () => (await t.http().get(`/v1/jobs/${jobId}`).set(bearer(ownerKey))).body,
      (j) => j.status === 'unknown',
    );
    return { jobId, attemptId: job.attempts[0].id as string };
  }

  async function logIn(key: string) {
    await page.goto(`${t.baseUrl}/console`);
    await page.getByLabel('API key').fill(key);
    await page.getByLabel('API key').press('Enter');
  }

  /** Fails when the page scrolls sideways: something on it is wider than the 420 px window. */
  async function fitsTheWindow() {
    const w = (await page.evaluate('({ page: document.documentElement.scrollWidth, window: window.innerWidth })')) as {
      page: number;
      window: number;
    };
    expect(w.window).toBe(420);
    // A scrollbar that takes room (not an overlay one) makes the page narrower than the window, never wider.
    expect(w.page).toBeLessThanOrEqual(w.window);
  }

  let alice: string;
  let operatorKey: string;

  beforeAll(async () => {
    const admin = await t.key('admin', ['providers:certify']);
    const certified = await t
      .http()
      .post('/v1/providers/sim-fallback/certifications')
      .set(bearer(admin))
      .send({ operation: 'summarize' });
    expect(certified.body.passed).toBe(true);
    alice = await t.key('alice', ['jobs:write', 'jobs:read']);
    operatorKey = await t.key('ops-team', ['ops:read', 'attempts:resolve']);
  });

  it('lets an operator find a hung attempt of another owner, resolve it, and watch the job succeed on its fallback', async () => {
    const { jobId, attemptId } = await hungJob(alice, 'console-hang', ['sim-hang', 'sim-fallback']);

    // Log in by keyboard: the key goes into sessionStorage, never into the URL or a cookie.
    await logIn(operatorKey);
    const row = page.locator('#queue-table tbody tr', { has: page.locator(`a[href="#job/${jobId}"]`) });
    await row.waitFor();
    await expect(row.textContent()).resolves.toContain('alice');
    await expect(row.textContent()).resolves.toContain('sim-hang');
    // What the operator needs to decide: the attempt id (the provider's Idempotency-Key), the operation, and what
    // resolving will do to this job (its chain goes on to the certified sim-fallback).
    await expect(row.textContent()).resolves.toContain(attemptId);
    await expect(row.textContent()).resolves.toContain('summarize');
    await expect(row.locator('.effect').textContent()).resolves.toMatch(/sim-fallback takes over/);
    await expect(row.locator('select option[value="failed"]').textContent()).resolves.toMatch(
      /late result is discarded/,
    );
    await expect(row.locator('select option[value="cancelled"]').textContent()).resolves.toMatch(
      /late result may still win/,
    );
    expect(page.url()).not.toContain(operatorKey);
    await expect(page.evaluate('sessionStorage.getItem("onejob.apiKey")')).resolves.toBe(operatorKey);
    await expect(page.context().cookies()).resolves.toEqual([]);
    await page.screenshot({ path: `${SHOTS}/1-queue.png` });

    // The job while it waits: unknown since it went unknown, its deadline long passed; never "running for".
    const events: ApiEvent[] = (await t.http().get(`/v1/jobs/${jobId}/events`).set(bearer(alice))).body.items;
    const wentUnknown = events.find((e) => e.attemptId === attemptId && e.to === 'unknown')!;
    const waiting = (await t.http().get(`/v1/jobs/${jobId}`).set(bearer(alice))).body.attempts[0];
    await page.goto(`${t.baseUrl}/console/#job/${jobId}`);
    const hung = page.locator(`#job-timeline .attempt[data-attempt="${attemptId}"]`);
    // Its hard timeout (1 s on sim-hang) passes: no result will come by itself (the page re-reads a live job).
    await hung.locator('.label', { hasText: /no result by its hard timeout at \d\d:\d\d:\d\d UTC/ }).waitFor();
    const hungText = (await hung.locator('.label').textContent())!;
    expect(hungText).toContain(
      `#1 sim-hang · unknown since ${utc(wentUnknown.at)} · deadline passed at ${utc(waiting.deadlineAt)}`,
    );
    expect(hungText).not.toContain('running for');
    await page.goto(`${t.baseUrl}/console/#queue`);
    await row.waitFor();

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
    await page
      .locator('#job-events tbody tr', { hasText: 'sim-fallback' })
      .or(page.locator('#job-events tbody tr', { hasText: 'won' }))
      .first()
      .waitFor();
    const attempts = page.locator('#job-timeline .attempt');
    await expect(attempts.count()).resolves.toBe(2);
    await expect(attempts.nth(0).textContent()).resolves.toMatch(/#1 sim-hang · cancelled/);
    await expect(attempts.nth(1).textContent()).resolves.toMatch(/#2 sim-fallback · winner/);
    // The operator's words are on the attempt and on its event, with who resolved it.
    await expect(attempts.nth(0).textContent()).resolves.toContain('by ops-team');
    await expect(attempts.nth(0).textContent()).resolves.toContain('“provider support: request never arrived”');
    const resolution = page.locator('#job-events tbody tr', { hasText: 'resolved_by_operator' });
    await expect(resolution.textContent()).resolves.toContain('ops-team');
    await expect(resolution.textContent()).resolves.toContain('provider support: request never arrived');
    // One time format: 24 h, ISO-like, UTC said.
    await expect(page.locator('#job-summary').textContent()).resolves.toMatch(
      /Created\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} UTC/,
    );
    await expect(page.locator('#job-events tbody tr td').first().textContent()).resolves.toMatch(
      /^\d{2}:\d{2}:\d{2} UTC$/,
    );
    await expect(page.locator('main').innerText()).resolves.not.toMatch(OTHER_TIME_FORMAT);
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
    // The chart's time axis and legend in the same format (uPlot's default is 12 h in the local zone).
    await page.locator('#chart-jobs .u-over').hover();
    await expect(page.locator('#chart-jobs .u-legend .u-series').first().textContent()).resolves.toMatch(
      /\d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC/,
    );
    await expect(page.locator('#screen-activity figcaption').first().textContent()).resolves.toMatch(
      /\d{2}:\d{2} to \d{2}:\d{2} UTC/,
    );
    await expect(page.locator('main').innerText()).resolves.not.toMatch(OTHER_TIME_FORMAT);
    await page.screenshot({ path: `${SHOTS}/4-activity.png` });

    const final = await t.http().get(`/v1/jobs/${jobId}`).set(bearer(alice));
    expect(final.body.attempts.map((a: { provider: string; status: string }) => [a.provider, a.status])).toEqual([
      ['sim-hang', 'cancelled'],
      ['sim-fallback', 'succeeded'],
    ]);
    expect(problems).toEqual([]);
  }, 60_000);

  it('refreshes the queue by itself: an attempt that goes unknown appears, one resolved elsewhere goes', async () => {
    await logIn(operatorKey);
    await page.locator('#queue-empty').waitFor();
    const { jobId, attemptId } = await hungJob(alice, 'console-queue-poll', ['sim-hang', 'sim-fallback']);
    // No click: the queue polls while it is on screen (every few seconds; 20 s of slack on a loaded machine).
    const row = page.locator('#queue-table tbody tr', { has: page.locator(`a[href="#job/${jobId}"]`) });
    await row.waitFor({ timeout: 20_000 });
    const resolved = await t
      .http()
      .post(`/v1/attempts/${attemptId}/resolve`)
      .set(bearer(operatorKey))
      .send({ status: 'cancelled', reason: 'elsewhere' });
    expect(resolved.status).toBe(200);
    await row.waitFor({ state: 'detached', timeout: 20_000 });
    await page.locator('#queue-empty').waitFor();
    expect(problems).toEqual([]);
  }, 60_000);

  it('resolves an unknown attempt from the job page, saying the job will fail when no provider is left', async () => {
    const { jobId, attemptId } = await hungJob(alice, 'console-job-resolve', ['sim-hang']);
    await logIn(operatorKey);
    const row = page.locator('#queue-table tbody tr', { has: page.locator(`a[href="#job/${jobId}"]`) });
    await expect(row.locator('.effect').textContent()).resolves.toMatch(/the job fails/);

    await page.goto(`${t.baseUrl}/console/#job/${jobId}`);
    const hung = page.locator(`#job-timeline .attempt[data-attempt="${attemptId}"]`);
    const form = hung.locator('form.resolve');
    await form.waitFor();
    await expect(hung.textContent()).resolves.toMatch(/the job fails/);
    await form.locator('select').selectOption('failed');
    await form.getByLabel('Reason').fill('provider logs: never received');
    // The page refreshes a live job every second: what the operator typed must survive it.
    await page.waitForTimeout(2500);
    await expect(form.getByLabel('Reason').inputValue()).resolves.toBe('provider logs: never received');
    await form.getByRole('button', { name: 'Resolve' }).click();
    await page.locator('#job-status', { hasText: 'failed' }).waitFor({ timeout: 15_000 });
    await expect(hung.locator('form.resolve').count()).resolves.toBe(0);
    await expect(hung.textContent()).resolves.toMatch(
      /#1 sim-hang · failed by ops-team at \d\d:\d\d:\d\d UTC · “provider logs: never received”/,
    );
    const final = await t.http().get(`/v1/jobs/${jobId}`).set(bearer(alice));
    expect([final.body.status, final.body.attempts[0].status]).toEqual(['failed', 'failed']);
    expect(problems).toEqual([]);
  }, 60_000);

  it('shows when a discarded late result really arrived and how long its call took', async () => {
    const created = await t
      .http()
      .post('/v1/jobs')
      .set(bearer(alice))
      .set('Idempotency-Key', 'console-late')
      .send({
        operation: 'summarize',
        input: { text: 'late, then discarded' },
        providers: ['sim-late', 'sim-fallback'],
      });
    const jobId: string = created.body.id;
    const job = await waitFor(
      async () => (await t.http().get(`/v1/jobs/${jobId}`).set(bearer(alice))).body,
      (j) => j.attempts[0]?.outcome === 'discarded',
      15_000,
    );
    const late = job.attempts[0];
    const events: ApiEvent[] = (await t.http().get(`/v1/jobs/${jobId}/events`).set(bearer(alice))).body.items;
    const arrived = events.find((e) => e.attemptId === late.id && e.reason === 'result_discarded')!;
    const took = Date.parse(arrived.at) - Date.parse(late.startedAt);
    // The premise: the call took its 1.5 s, and the attempt's finishedAt is when failover gave up on it, earlier.
    expect(took).toBeGreaterThanOrEqual(1500);
    expect(Date.parse(late.finishedAt)).toBeLessThan(Date.parse(arrived.at));

    await logIn(operatorKey);
    await page.goto(`${t.baseUrl}/console/#job/${jobId}`);
    const label = page.locator(`#job-timeline .attempt[data-attempt="${late.id}"] .label`);
    await label.waitFor();
    const text = (await label.textContent())!;
    expect(text).toContain(`#1 sim-late · discarded · result arrived at ${utc(arrived.at)}, took ${ms(took)}`);
    expect(text).toContain(`given up at ${utc(late.finishedAt)}`);
    expect(problems).toEqual([]);
  }, 60_000);

  it('clears the previous job when the next one is not found', async () => {
    const { jobId } = await hungJob(alice, 'console-not-found', ['sim-hang']);
    await logIn(operatorKey);
    await page.goto(`${t.baseUrl}/console/#job/${jobId}`);
    await page.locator('#job-detail-id', { hasText: jobId }).waitFor();
    await page.getByLabel('Job id').fill(randomUUID());
    await page.getByLabel('Job id').press('Enter');
    await page.locator('#message', { hasText: 'Job was not found' }).waitFor();
    await expect(page.locator('#job-detail').isHidden()).resolves.toBe(true);
    await expect(page.locator('#job-timeline .attempt').count()).resolves.toBe(0);
    // Same when a search by idempotency key finds nothing.
    await page.goto(`${t.baseUrl}/console/#job/${jobId}`);
    await page.locator('#job-detail-id', { hasText: jobId }).waitFor();
    await page.getByLabel('Owner').fill('alice');
    await page.getByLabel('Idempotency key').fill('no-such-key');
    await page.getByLabel('Idempotency key').press('Enter');
    await page.locator('#message', { hasText: 'No job of that owner' }).waitFor();
    await expect(page.locator('#job-detail').isHidden()).resolves.toBe(true);
    expect(problems).toEqual([]);
  }, 60_000);

  it("shows a batch with its progress to an operator, and lists an owner's own batches", async () => {
    const items = ['one', 'two', 'three'].map((k) => ({
      key: `console-batch-${k}`,
      operation: 'summarize',
      input: { text: k },
    }));
    const created = await t
      .http()
      .post('/v1/batches')
      .set(bearer(alice))
      .set('Idempotency-Key', 'console-batch')
      .send({ items });
    expect(created.status).toBe(201);
    const batchId: string = created.body.id;
    await logIn(operatorKey);
    await page.goto(`${t.baseUrl}/console/#batches/${batchId}`);
    await page.locator('#batch-detail-id', { hasText: batchId }).waitFor();
    await page.locator('#batches-empty', { hasText: 'no jobs:read' }).waitFor();
    // The screen refreshes by itself until every job is terminal.
    await page
      .locator('#batch-progress-text', { hasText: '3 of 3 items done (completed)' })
      .waitFor({ timeout: 20_000 });
    await expect(page.locator('#batch-jobs tbody tr').count()).resolves.toBe(3);
    await expect(page.locator('#batch-summary').textContent()).resolves.toContain('3 succeeded');
    await page.screenshot({ path: `${SHOTS}/batch.png`, fullPage: true });
    await logIn(alice);
    await page.goto(`${t.baseUrl}/console/#batches`);
    await page.locator('#batches-table tbody tr', { hasText: 'console-batch' }).waitFor();
    await expect(
      page.locator('#batches-table tbody tr', { hasText: 'console-batch' }).textContent(),
    ).resolves.toContain('3 / 3');
    expect(problems).toEqual([]);
  }, 60_000);

  it('fits a 420 px wide screen: no screen scrolls sideways, wide tables scroll inside their own box', async () => {
    const { jobId } = await hungJob(alice, 'console-narrow', ['sim-hang', 'sim-fallback']);
    await page.setViewportSize({ width: 420, height: 860 });
    try {
      await logIn(operatorKey);
      await page.locator('#queue-table tbody tr', { has: page.locator(`a[href="#job/${jobId}"]`) }).waitFor();
      await fitsTheWindow();
      await page.screenshot({ path: `${SHOTS}/5-narrow-queue.png`, fullPage: true });

      await page.goto(`${t.baseUrl}/console/#job/${jobId}`);
      await page.locator('#job-timeline .attempt form.resolve').waitFor();
      await fitsTheWindow();
      await page.screenshot({ path: `${SHOTS}/5-narrow-job.png`, fullPage: true });

      await page.goto(`${t.baseUrl}/console/#providers`);
      await page.locator('#providers-table tbody tr').first().waitFor();
      await fitsTheWindow();
      // The providers' table is wider than the phone: it scrolls in its own box, which fits the screen.
      const box = (await page.evaluate(
        '(({ parentElement: w }) => ({ overflow: getComputedStyle(w).overflowX, right: w.getBoundingClientRect().right }))(document.querySelector("#providers-table"))',
      )) as { overflow: string; right: number };
      expect(box.overflow).toBe('auto');
      expect(box.right).toBeLessThanOrEqual(420);
      await page.screenshot({ path: `${SHOTS}/5-narrow-providers.png`, fullPage: true });

      await page.goto(`${t.baseUrl}/console/#activity`);
      await page.locator('#chart-jobs canvas').waitFor();
      await fitsTheWindow();
      await page.screenshot({ path: `${SHOTS}/5-narrow-activity.png`, fullPage: true });
    } finally {
      await page.setViewportSize({ width: 1280, height: 800 });
    }
    expect(problems).toEqual([]);
  }, 60_000);

  it("serves the page with a strict Content-Security-Policy and answers a bad key with the API's own refusal", async () => {
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
