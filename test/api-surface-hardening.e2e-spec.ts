import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { chromium } from 'playwright-core';

import { bearer, startTestApp, type TestApp } from './helpers/app.js';

interface Parameter {
  name: string;
  in: 'path' | 'query' | 'header';
  schema: { type?: string; enum?: unknown[] };
}
interface Operation {
  operationId: string;
  parameters?: Parameter[];
  requestBody?: unknown;
  responses: Record<string, unknown>;
}

const document = JSON.parse(readFileSync('openapi.json', 'utf8')) as {
  paths: Record<string, Record<string, Operation>>;
};
const operations = Object.entries(document.paths).flatMap(([path, item]) =>
  Object.entries(item).map(([method, operation]) => ({
    path,
    method: method as 'get' | 'post' | 'put' | 'delete',
    operation,
  })),
);
const ANY_ID = '00000000-0000-4000-8000-000000000000';
/** A path of the document with its parameters filled: ids that exist nowhere, a provider and an owner that do. */
const fill = (path: string) =>
  path.replace(/\{(\w+)\}/g, (_m, name: string) =>
    name === 'name' ? 'sim-primary' : name === 'ownerId' ? 'owner-surface' : ANY_ID,
  );

/** Every row a request could have written. */
const written = (t: TestApp) =>
  t.dataSource.query(`SELECT (SELECT count(*) FROM jobs)::int AS jobs, (SELECT count(*) FROM job_events)::int AS events,
      (SELECT count(*) FROM attempts)::int AS attempts, (SELECT count(*) FROM certifications)::int AS certifications,
      (SELECT count(*) FROM webhook_endpoints)::int AS webhooks, (SELECT count(*) FROM owner_budgets)::int AS budgets`);

describe('the API surface: the document and the service agree (issue 22, items 9 and 15)', () => {
  let t: TestApp;
  let key: string;

  beforeAll(async () => {
    t = await startTestApp();
    key = await t.key('owner-surface');
  });
  afterAll(() => t.close());

  const send = (method: 'get' | 'post' | 'put' | 'delete', url: string, body?: string) => {
    let req = t.http()[method](url).set(bearer(key)).set('Idempotency-Key', `surface-${Math.random()}`);
    if (body !== undefined) req = req.set('Content-Type', 'application/json').send(body);
    return req;
  };

  it.each(operations)(
    '$method $path answers 400 naming an unknown query parameter and writes nothing',
    async ({ path, method, operation }) => {
      const before = await written(t);
      const body = operation.requestBody ? JSON.stringify({ operation: 'summarize', input: { text: 'x' } }) : undefined;
      const res = await send(method, `${fill(path)}?unexpected=1`, body);
      expect({ status: res.status, code: res.body.code }).toEqual({ status: 400, code: 'validation_failed' });
      expect(res.headers['content-type']).toMatch(/^application\/problem\+json/);
      expect(res.body.errors).toContainEqual({ field: 'unexpected', message: expect.any(String) });
      expect(await written(t)).toEqual(before);
    },
  );

  const textQueries = operations.flatMap(({ path, method, operation }) =>
    (operation.parameters ?? [])
      .filter((p) => p.in === 'query' && p.schema.type === 'string')
      .map((p) => ({ path, method, name: p.name })),
  );

  it.each(textQueries)(
    '$method $path?$name=fuzz%00nul answers 400 naming $name, never a 500',
    async ({ path, method, name }) => {
      const res = await send(method, `${fill(path)}?${name}=fuzz%00nul${name === 'idempotencyKey' ? '&owner=o' : ''}`);
      expect({ status: res.status, code: res.body.code }).toEqual({ status: 400, code: 'validation_failed' });
      expect(res.body.errors.map((e: { field: string }) => e.field)).toContain(name);
    },
  );

  it('refuses a NUL in a path parameter the same way', async () => {
    const res = await send(
      'post',
      '/v1/providers/fuzz%00nul/certifications',
      JSON.stringify({ operation: 'summarize' }),
    );
    expect({ status: res.status, code: res.body.code }).toEqual({ status: 400, code: 'validation_failed' });
    expect(res.body.errors.map((e: { field: string }) => e.field)).toContain('name');
  });

  const bodies = operations.filter(({ operation }) => operation.requestBody);
  const unstorable = ['{"reason":"a\\u0000b"}', '{"reason":"\\ud800"}', '{"monthlyLimit":1e400}'];

  // The response check (test/helpers/app.ts) fails the test on a status the operation does not declare.
  it.each(bodies)(
    '$method $path declares the 422 it answers to NUL, a lone surrogate and 1e400',
    async ({ path, method }) => {
      const before = await written(t);
      for (const body of unstorable) {
        const res = await send(method, fill(path), body);
        expect({ status: res.status, code: res.body.code }).toEqual({ status: 422, code: 'validation_failed' });
      }
      expect(await written(t)).toEqual(before);
    },
  );

  it('documents every whole-number query parameter as an integer, and refuses a fraction', async () => {
    const numeric = operations.flatMap(({ path, method, operation }) =>
      (operation.parameters ?? [])
        .filter((p) => ['limit', 'olderThan', 'minutes'].includes(p.name))
        .map((p) => ({ path, method, ...p })),
    );
    expect(numeric.length).toBeGreaterThanOrEqual(7);
    expect(numeric.filter((p) => p.schema.type !== 'integer').map((p) => `${p.method} ${p.path} ${p.name}`)).toEqual(
      [],
    );
    for (const p of numeric) {
      const res = await send(p.method, `${fill(p.path)}?${p.name}=1.5`);
      expect(res.status).toBe(400);
    }
  });
});

describe('headers a browser relies on (issue 22, item 17)', () => {
  let t: TestApp;

  beforeAll(async () => {
    t = await startTestApp();
  });
  afterAll(() => t.close());

  it('serves /docs with a Content-Security-Policy that forbids framing, and every JSON answer with nosniff', async () => {
    for (const path of ['/docs', '/docs/']) {
      const ui = await fetch(`${t.baseUrl}${path}`);
      expect(ui.status).toBe(200);
      const csp = ui.headers.get('content-security-policy') ?? '';
      expect(csp).toMatch(/frame-ancestors 'none'/);
      expect(csp).toMatch(/default-src 'none'/);
      expect(csp).toMatch(/script-src 'self'(;|$)/);
      // Every script and style the page names is served from here, which the policy allows.
      const html = await ui.text();
      const assets = [...html.matchAll(/(?:src|href)="([^"]+\.(?:js|css))"/g)].map(
        (m) => new URL(m[1], `${t.baseUrl}${path}`).href,
      );
      expect(assets.length).toBeGreaterThanOrEqual(2);
      for (const asset of assets) {
        const res = await fetch(asset);
        expect({ asset, status: res.status }).toEqual({ asset, status: 200 });
        await res.arrayBuffer();
      }
    }
    const key = await t.key('owner-headers');
    for (const res of [
      await fetch(`${t.baseUrl}/v1/jobs`, { headers: bearer(key) }),
      await fetch(`${t.baseUrl}/v1/jobs/nope`, { headers: bearer(key) }),
      await fetch(`${t.baseUrl}/v1/jobs`),
      await fetch(`${t.baseUrl}/docs-json`),
      await fetch(`${t.baseUrl}/health/live`),
    ]) {
      expect(res.headers.get('content-type')).toMatch(/json/);
      expect(res.headers.get('x-content-type-options')).toBe('nosniff');
      await res.arrayBuffer();
    }
  });

  const CHROMIUM = '/usr/bin/chromium';
  (existsSync(CHROMIUM) ? it : it.skip)(
    'renders Swagger UI under that policy in a real browser, with no violation',
    async () => {
      const profile = mkdtempSync(join(tmpdir(), 'onejob-chromium-'));
      const browser = await chromium.launchPersistentContext(profile, {
        executablePath: CHROMIUM,
        headless: true,
        args: [
          '--no-sandbox',
          '--disable-gpu',
          '--no-first-run',
          '--disable-background-networking',
          '--disable-component-update',
        ],
      });
      try {
        const page = browser.pages()[0] ?? (await browser.newPage());
        const problems: string[] = [];
        page.on('console', (m) => m.type() === 'error' && problems.push(m.text()));
        page.on('pageerror', (e) => problems.push(e.message));
        await page.goto(`${t.baseUrl}/docs`);
        await page.waitForSelector('.swagger-ui .info .title', { timeout: 20_000 });
        expect(await page.textContent('.swagger-ui .info .title')).toContain('onejob');
        expect(await page.locator('.opblock').count()).toBeGreaterThan(10);
        expect(problems).toEqual([]);
      } finally {
        await browser.close();
        rmSync(profile, { recursive: true, force: true });
      }
    },
    60_000,
  );
});
