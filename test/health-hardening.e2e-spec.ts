import { freePort } from '../src/database/embedded-postgres.js';
import { Lifecycle } from '../src/health/lifecycle.js';
import { bearer, startTestApp, type TestApp } from './helpers/app.js';
import { createTestDatabase, type TestDatabase } from './helpers/database.js';
import { startTcpProxy, type TcpProxy } from './helpers/tcp-proxy.js';
import { waitFor } from './helpers/wait.js';

/**
 * Readiness is about the process (docs/operations.md#probes): a database outage must not take every replica out of
 * service, or clients get connection errors instead of the documented 503 + Retry-After.
 */
describe('readiness through a database outage', () => {
  let db: TestDatabase;
  let proxy: TcpProxy;
  let t: TestApp;
  let key: string;

  beforeAll(async () => {
    db = await createTestDatabase();
    const direct = new URL(db.url);
    proxy = await startTcpProxy(direct.hostname, Number(direct.port || 5432));
    const proxied = new URL(db.url);
    proxied.hostname = '127.0.0.1';
    proxied.port = String(proxy.port);
    t = await startTestApp({ dbPoolSize: 4 }, { name: db.name, url: proxied.toString(), drop: async () => undefined });
    key = await t.key('owner-ready');
  });
  afterAll(async () => {
    await proxy?.restore().catch(() => undefined);
    await t?.close();
    await proxy?.close();
    await db?.drop();
  });

  it('stays 200 (degraded, database "unreachable" in its body) while requests answer 503 + Retry-After, and recovers', async () => {
    expect((await t.http().get('/health/ready').expect(200)).body.status).toBe('ready');

    await proxy.cut();
    try {
      const ready = await t.http().get('/health/ready');
      expect({ status: ready.status, code: ready.body.code }).toEqual({ status: 200, code: undefined });
      expect(ready.body).toEqual({ status: 'degraded', database: 'unreachable' });
      const listed = await t.http().get('/v1/jobs').set(bearer(key));
      expect({ status: listed.status, code: listed.body.code }).toEqual({ status: 503, code: 'service_unavailable' });
      expect(listed.headers['retry-after']).toMatch(/^\d+$/);
    } finally {
      await proxy.restore();
    }

    const listStatus = async () => (await t.http().get('/v1/jobs').set(bearer(key))).status;
    await waitFor(listStatus, (status) => status === 200, 20_000, 200);
    await t.http().get('/health/ready').expect(200, { status: 'ready', database: 'up' });
  });

  it('answers 503 + Retry-After from the moment shutdown begins', async () => {
    const lifecycle = t.app.get(Lifecycle);
    lifecycle.shuttingDown = true;
    try {
      const res = await t.http().get('/health/ready').expect(503);
      expect(res.body.code).toBe('service_unavailable');
      expect(res.headers['retry-after']).toMatch(/^\d+$/);
    } finally {
      lifecycle.shuttingDown = false;
    }
  });
});

describe('METRICS_PORT', () => {
  let t: TestApp;
  let metricsPort: number;
  beforeAll(async () => {
    metricsPort = await freePort();
    t = await startTestApp({ metricsPort, host: '127.0.0.1' });
  });
  afterAll(() => t?.close());

  it('serves /metrics on its own port only: the API port answers 404 problem+json', async () => {
    const own = await fetch(`http://127.0.0.1:${metricsPort}/metrics`);
    expect(own.status).toBe(200);
    expect(own.headers.get('content-type')).toMatch(/^text\/plain/);
    expect(await own.text()).toMatch(/^onejob_build_info\{version="\d+\.\d+\.\d+[^"]*",node="\d+\.\d+\.\d+"\} 1$/m);
    expect((await fetch(`http://127.0.0.1:${metricsPort}/v1/jobs`)).status).toBe(404);

    const api = await t.http().get('/metrics');
    expect(api.status).toBe(404);
    expect(api.headers['content-type']).toMatch(/^application\/problem\+json/);
    expect(api.body.code).toBe('not_found');
  });
});
