import { createServer as createHttpServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { type AddressInfo, createConnection, createServer, type Server, type Socket } from 'node:net';

import { startTestApp, type TestApp } from '../../../test/helpers/app.js';
import { provider, writeCatalog } from '../../../test/helpers/catalog.js';
import { TestIdentityProvider, writeIssuers } from '../../../test/helpers/identity-provider.js';
import { startTcpProxy } from '../../../test/helpers/tcp-proxy.js';
import {
  AuthenticationError,
  BatchWaitTimeoutError,
  IdempotencyKeyReusedError,
  type Job,
  NotFoundError,
  OnejobClient,
  RequestTimeoutError,
  ServerError,
  UnprocessableEntityError,
  uuidv7,
  WaitTimeoutError,
} from '../src/index.js';

const intent = { operation: 'summarize', input: { text: 'The quick brown fox.' } };
const listen = async (server: Server) => {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
};
const close = (server: Server) => new Promise<void>((resolve) => server.close(() => resolve()));

/** A fetch that counts and records what the client sends. */
function recordingFetch() {
  const requests: Array<{ method: string; url: string; headers: Headers; at: number }> = [];
  const wrapped: typeof fetch = (input, init) => {
    requests.push({
      method: init?.method ?? 'GET',
      url: String(input),
      headers: new Headers(init?.headers),
      at: Date.now(),
    });
    return fetch(input, init);
  };
  return { requests, fetch: wrapped };
}

/**
 * A TCP proxy in front of the service that lets the first request through, waits for the service's whole answer
 * (so the job is committed), then destroys the client's socket instead of forwarding it: the answer is lost.
 */
async function droppingProxy(target: string) {
  const upstreamPort = Number(new URL(target).port);
  const dropped: string[] = [];
  let connections = 0;
  const sockets = new Set<Socket>();
  const server = createServer((client) => {
    sockets.add(client);
    const upstream = createConnection(upstreamPort, '127.0.0.1');
    sockets.add(upstream);
    const drop = connections++ === 0;
    client.pipe(upstream);
    if (!drop) upstream.pipe(client);
    let answer = '';
    upstream.on('data', (chunk: Buffer) => {
      if (!drop) return;
      answer += chunk.toString('latin1');
      const end = answer.indexOf('\r\n\r\n');
      const length = Number(/content-length: (\d+)/i.exec(answer)?.[1] ?? NaN);
      if (end >= 0 && answer.length >= end + 4 + length) {
        dropped.push(answer);
        client.destroy();
        upstream.destroy();
      }
    });
    client.on('error', () => upstream.destroy());
    upstream.on('error', () => client.destroy());
    client.on('close', () => upstream.destroy());
  });
  const url = await listen(server);
  return {
    url,
    dropped,
    connections: () => connections,
    close: async () => {
      for (const socket of sockets) socket.destroy();
      await close(server);
    },
  };
}

/** A tiny HTTP server answering from a script, recording the requests. */
async function fakeService(script: Array<(req: IncomingMessage, res: ServerResponse) => void>) {
  const seen: Array<{ headers: IncomingMessage['headers']; at: number }> = [];
  const server = createHttpServer((req, res) => {
    seen.push({ headers: req.headers, at: Date.now() });
    req.resume();
    req.on('end', () => (script[Math.min(seen.length - 1, script.length - 1)] ?? (() => res.end()))(req, res));
  });
  const url = await listen(server);
  return {
    url,
    seen,
    close: async () => {
      server.closeAllConnections();
      await close(server);
    },
  };
}

const job = (status: Job['status']): Job => ({
  id: uuidv7(),
  status,
  operation: 'summarize',
  input: {},
  providers: ['sim-primary'],
  idempotencyKey: 'k',
  version: 0,
  priority: 0,
  result: null,
  error: null,
  completedBy: null,
  createdAt: new Date().toISOString(),
  updatedAt: new Date().toISOString(),
  completedAt: null,
  cost: [],
  attempts: [],
});
const problem = (res: ServerResponse, status: number, code: string, headers: Record<string, string> = {}) => {
  res.writeHead(status, { 'content-type': 'application/problem+json', 'x-request-id': `req-${status}`, ...headers });
  res.end(
    JSON.stringify({
      type: `urn:onejob:problem:${code}`,
      title: code,
      status,
      detail: code,
      code,
      requestId: `req-${status}`,
    }),
  );
};
const json = (res: ServerResponse, status: number, body: unknown) => {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
};

describe('the TypeScript client against the real service', () => {
  let t: TestApp;
  let apiKey: string;
  const fast = { baseDelayMs: 20, maxDelayMs: 100 };

  beforeAll(async () => {
    t = await startTestApp();
  });
  afterAll(() => t.close());
  beforeEach(async () => {
    await t.truncate();
    apiKey = await t.key('owner-client');
  });

  it('creates a job with a UUIDv7 key of its own, and gets it back replayed with that key', async () => {
    const client = new OnejobClient({ baseUrl: t.baseUrl, apiKey });
    const created = await client.createJob(intent);
    expect(created).toMatchObject({ replayed: false, tries: 1 });
    expect(created.idempotencyKey).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    expect(created.job).toMatchObject({ status: 'pending', idempotencyKey: created.idempotencyKey, attempts: [] });
    const again = await client.createJob(intent, { idempotencyKey: created.idempotencyKey });
    expect(again).toMatchObject({ replayed: true, tries: 1, job: { id: created.job.id } });
    expect(await client.getJob(created.job.id)).toMatchObject({ id: created.job.id });
    expect((await client.listJobs({ limit: 10 })).items.map((j) => j.id)).toEqual([created.job.id]);
    expect(await client.cancelJob(created.job.id)).toMatchObject({ status: 'cancelled' });
  });

  it('makes one key per call: two calls without a key are two intents, two jobs', async () => {
    const client = new OnejobClient({ baseUrl: t.baseUrl, apiKey });
    const [a, b] = [await client.createJob(intent), await client.createJob(intent)];
    expect(a.idempotencyKey).not.toBe(b.idempotencyKey);
    expect(a.job.id).not.toBe(b.job.id);
  });

  it('retries a response lost after the service committed with the same key: the same job (200, replayed), never a second', async () => {
    const proxy = await droppingProxy(t.baseUrl);
    try {
      const recorder = recordingFetch();
      const client = new OnejobClient({ baseUrl: proxy.url, apiKey, fetch: recorder.fetch, retry: fast });
      const created = await client.createJob(intent);

      // The service answered the first try (201, committed); the proxy threw the answer away.
      expect(proxy.dropped).toHaveLength(1);
      expect(proxy.dropped[0]).toMatch(/^HTTP\/1\.1 201 /);
      expect(created).toMatchObject({ replayed: true, tries: 2 });
      const keys = recorder.requests.map((r) => r.headers.get('idempotency-key'));
      expect(keys).toEqual([created.idempotencyKey, created.idempotencyKey]);
      const rows = await t.dataSource.query('SELECT id FROM jobs WHERE idempotency_key = $1', [created.idempotencyKey]);
      expect(rows).toEqual([{ id: created.job.id }]);
      expect((await t.dataSource.query('SELECT count(*)::int AS n FROM jobs'))[0].n).toBe(1);
    } finally {
      await proxy.close();
    }
  });

  it('retries a batch whose answer was lost with the same batch key: the same batch, replayed, its jobs made once', async () => {
    const proxy = await droppingProxy(t.baseUrl);
    try {
      const recorder = recordingFetch();
      const client = new OnejobClient({ baseUrl: proxy.url, apiKey, fetch: recorder.fetch, retry: fast });
      const items = Array.from({ length: 50 }, (_, i) => ({
        key: `doc-${i}`,
        operation: 'summarize',
        input: { text: `doc ${i}` },
      }));
      const created = await client.createBatch(items, { idempotencyKey: 'import-1', metadata: { source: 'client' } });

      expect(proxy.dropped).toHaveLength(1);
      expect(proxy.dropped[0]).toMatch(/^HTTP\/1\.1 201 /);
      expect(created).toMatchObject({ replayed: true, tries: 2, idempotencyKey: 'import-1' });
      expect(recorder.requests.map((r) => r.headers.get('idempotency-key'))).toEqual(['import-1', 'import-1']);
      expect(created.batch.items.every((i) => i.outcome === 'created')).toBe(true);
      expect((await t.dataSource.query('SELECT count(*)::int AS n FROM batches'))[0].n).toBe(1);
      expect((await t.dataSource.query('SELECT count(*)::int AS n FROM jobs'))[0].n).toBe(50);

      const direct = new OnejobClient({ baseUrl: t.baseUrl, apiKey, retry: fast });
      const page = await direct.listBatchJobs(created.batch.id, { limit: 10 });
      expect(page.items.map((i) => i.key)).toEqual(items.slice(0, 10).map((i) => i.key));
      expect((await direct.listBatches()).items.map((b) => b.id)).toEqual([created.batch.id]);
      const waiting = (await direct
        .waitForBatch(created.batch.id, { timeoutMs: 300, pollMs: 100 })
        .catch((e: unknown) => e)) as BatchWaitTimeoutError;
      expect(waiting).toBeInstanceOf(BatchWaitTimeoutError);
      expect(waiting.batch).toMatchObject({ status: 'running', liveJobs: 50 });
      await direct.cancelBatch(created.batch.id);
      const done = await direct.waitForBatch(created.batch.id, { timeoutMs: 5_000 });
      expect(done).toMatchObject({ status: 'completed', liveJobs: 0, counts: { cancelled: 50 } });
    } finally {
      await proxy.close();
    }
  });

  it('never retries a 409: the key bound to another intent is an IdempotencyKeyReusedError with code and requestId', async () => {
    const recorder = recordingFetch();
    const client = new OnejobClient({ baseUrl: t.baseUrl, apiKey, fetch: recorder.fetch, retry: fast });
    await client.createJob(intent, { idempotencyKey: 'order-42' });
    recorder.requests.length = 0;
    const error = await client
      .createJob({ ...intent, input: { text: 'another' } }, { idempotencyKey: 'order-42' })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(IdempotencyKeyReusedError);
    expect(error).toMatchObject({ status: 409, code: 'idempotency_key_reused', requestId: expect.any(String) });
    expect(recorder.requests).toHaveLength(1);
  });

  it('never retries a 422: unknown operations and refused inputs carry the code and the field errors', async () => {
    const recorder = recordingFetch();
    const client = new OnejobClient({ baseUrl: t.baseUrl, apiKey, fetch: recorder.fetch, retry: fast });
    await expect(client.createJob({ operation: 'nope', input: {} })).rejects.toMatchObject({
      name: 'UnprocessableEntityError',
      code: 'unknown_operation',
    });
    const refused = await client.createJob({ operation: 'summarize', input: { text: 42 } }).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(UnprocessableEntityError);
    expect(refused).toMatchObject({
      code: 'validation_failed',
      errors: [expect.objectContaining({ field: expect.stringMatching(/^input/) })],
    });
    expect(recorder.requests).toHaveLength(2);
  });

  it('never retries 401 and 404', async () => {
    const recorder = recordingFetch();
    const stranger = new OnejobClient({ baseUrl: t.baseUrl, apiKey: 'not-a-key', fetch: recorder.fetch, retry: fast });
    await expect(stranger.getJob(uuidv7())).rejects.toBeInstanceOf(AuthenticationError);
    const client = new OnejobClient({ baseUrl: t.baseUrl, apiKey, fetch: recorder.fetch, retry: fast });
    await expect(client.getJob(uuidv7())).rejects.toBeInstanceOf(NotFoundError);
    expect(recorder.requests).toHaveLength(2);
  });

  it('waits with Prefer: wait and throws WaitTimeoutError with the last state when the job is not done in time', async () => {
    const client = new OnejobClient({ baseUrl: t.baseUrl, apiKey });
    const { job: created } = await client.createJob(intent);
    const started = Date.now();
    const error = (await client
      .waitForJob(created.id, { timeoutMs: 1_500 })
      .catch((e: unknown) => e)) as WaitTimeoutError;
    expect(error).toBeInstanceOf(WaitTimeoutError);
    expect(error.job).toMatchObject({ id: created.id, status: 'pending' });
    expect(Date.now() - started).toBeGreaterThanOrEqual(1_000);
    expect(Date.now() - started).toBeLessThan(5_000);
  });
});

describe('a token provider instead of a key', () => {
  let t: TestApp;
  let idp: TestIdentityProvider;

  beforeAll(async () => {
    idp = await new TestIdentityProvider().start();
    await idp.addKey('ES256');
    const authIssuersFile = writeIssuers([
      {
        issuer: idp.issuer,
        audience: 'onejob',
        clockToleranceSec: 0,
        owner: { claim: 'sub' },
        scopes: { static: ['jobs:write', 'jobs:read'] },
      },
    ]);
    t = await startTestApp({ authIssuersFile });
  });
  afterAll(async () => {
    await t?.close();
    await idp?.stop();
  });

  it('asks the provider again when the service answers token_expired, and sends the refused request once more', async () => {
    const recorder = recordingFetch();
    const issued: string[] = [];
    // The first token the provider hands out has just expired; the next is good for an hour.
    const token = async () => {
      const expiresIn = issued.length === 0 ? Math.floor(Date.now() / 1000) - 1 : '1h';
      issued.push(await idp.sign({ sub: 'team-token' }, { audience: 'onejob', expiresIn }));
      return issued.at(-1)!;
    };
    const client = new OnejobClient({ baseUrl: t.baseUrl, token, fetch: recorder.fetch });
    const created = await client.createJob(intent);
    expect(created.replayed).toBe(false);
    expect(issued).toHaveLength(2);
    expect(recorder.requests.map((r) => r.headers.get('authorization'))).toEqual(issued.map((x) => `Bearer ${x}`));
    // The good token is kept: the next call asks the provider nothing.
    expect((await client.getJob(created.job.id)).id).toBe(created.job.id);
    expect(issued).toHaveLength(2);
    const [row] = await t.dataSource.query('SELECT owner_id FROM jobs WHERE id = $1', [created.job.id]);
    expect(row.owner_id).toBe('team-token');
  });

  it('needs exactly one of apiKey and token', () => {
    expect(() => new OnejobClient({ baseUrl: t.baseUrl })).toThrow(TypeError);
    expect(() => new OnejobClient({ baseUrl: t.baseUrl, apiKey: 'oj_x', token: () => 'y' })).toThrow(TypeError);
  });
});

describe('waitForJob against a running worker', () => {
  it('returns the job once it is terminal', async () => {
    const t = await startTestApp({ role: 'all', workerPollMs: 10, reconcileIntervalMs: 100 });
    try {
      const client = new OnejobClient({ baseUrl: t.baseUrl, apiKey: await t.key('owner-wait') });
      const { job } = await client.createJob(intent);
      const done = await client.waitForJob(job.id, { timeoutMs: 20_000 });
      expect(done).toMatchObject({ id: job.id, status: 'succeeded' });
    } finally {
      await t.close();
    }
  });
});

describe('streamJobEvents against a running worker', () => {
  it('yields every event once, in order, resuming with Last-Event-ID across a dropped connection', async () => {
    const catalogFile = writeCatalog((c) => (provider(c, 'sim-primary').simulate.latencyMs = 1200));
    const t = await startTestApp({ role: 'all', catalogFile, workerPollMs: 10, streamGraceMs: 200 });
    const proxy = await startTcpProxy('127.0.0.1', Number(new URL(t.baseUrl).port));
    try {
      const apiKey = await t.key('owner-stream');
      const { requests, fetch: recorded } = recordingFetch();
      const client = new OnejobClient({ baseUrl: `http://127.0.0.1:${proxy.port}`, apiKey, fetch: recorded });
      const { job } = await client.createJob(intent);
      const seen: string[] = [];
      for await (const event of client.streamJobEvents(job.id)) {
        seen.push(event.id);
        // Cut every connection once the first events are in: the client must come back on its own.
        if (seen.length === 2) await proxy.cut().then(() => proxy.restore());
      }
      const page = await fetch(`${t.baseUrl}/v1/jobs/${job.id}/events?limit=500`, {
        headers: { Authorization: `Bearer ${apiKey}` },
      });
      expect(seen).toEqual(((await page.json()) as { items: Array<{ id: string }> }).items.map((e) => e.id));
      // It came back on its own, after an event it had (those read before the cut may be more than two).
      const resumed = requests.filter((r) => r.headers.get('last-event-id') !== null);
      expect(resumed.length).toBeGreaterThanOrEqual(1);
      expect(seen.slice(1)).toContain(resumed[0].headers.get('last-event-id'));
    } finally {
      await proxy.close();
      await t.close();
    }
  }, 40_000);
});

describe('the retry policy, against a scripted server', () => {
  it('honours Retry-After on 503, then retries a 429, with the same key each time', async () => {
    const fake = await fakeService([
      (_req, res) => problem(res, 503, 'service_unavailable', { 'retry-after': '1' }),
      (_req, res) => problem(res, 429, 'too_many_requests'),
      (_req, res) => json(res, 201, job('pending')),
    ]);
    try {
      const client = new OnejobClient({ baseUrl: fake.url, apiKey: 'k', retry: { baseDelayMs: 20, maxDelayMs: 50 } });
      const created = await client.createJob(intent);
      expect(created.tries).toBe(3);
      expect(fake.seen.map((s) => s.headers['idempotency-key'])).toEqual(Array(3).fill(created.idempotencyKey));
      expect(fake.seen[1].at - fake.seen[0].at).toBeGreaterThanOrEqual(1_000);
      expect(fake.seen[2].at - fake.seen[1].at).toBeLessThan(1_000);
    } finally {
      await fake.close();
    }
  });

  it('retries a try that times out, with the same key', async () => {
    const fake = await fakeService([() => undefined, (_req, res) => json(res, 201, job('pending'))]);
    try {
      const client = new OnejobClient({ baseUrl: fake.url, apiKey: 'k', timeoutMs: 300, retry: { baseDelayMs: 20 } });
      const created = await client.createJob(intent, { idempotencyKey: 'mine' });
      expect(created.tries).toBe(2);
      expect(fake.seen.map((s) => s.headers['idempotency-key'])).toEqual(['mine', 'mine']);
    } finally {
      await fake.close();
    }
  });

  it('gives up after maxAttempts, and does not retry a 500 or a lost cancel', async () => {
    const fake = await fakeService([(_req, res) => problem(res, 503, 'service_unavailable', { 'retry-after': '0' })]);
    try {
      const client = new OnejobClient({
        baseUrl: fake.url,
        apiKey: 'k',
        timeoutMs: 300,
        retry: { maxAttempts: 3, baseDelayMs: 10 },
      });
      await expect(client.createJob(intent)).rejects.toMatchObject({
        name: 'ServerError',
        status: 503,
        code: 'service_unavailable',
        requestId: 'req-503',
      });
      expect(fake.seen).toHaveLength(3);
    } finally {
      await fake.close();
    }
    const broken = await fakeService([(_req, res) => problem(res, 500, 'internal_error')]);
    const silent = await fakeService([() => undefined]);
    try {
      await expect(new OnejobClient({ baseUrl: broken.url, apiKey: 'k' }).createJob(intent)).rejects.toBeInstanceOf(
        ServerError,
      );
      expect(broken.seen).toHaveLength(1);
      const client = new OnejobClient({ baseUrl: silent.url, apiKey: 'k', timeoutMs: 200 });
      await expect(client.cancelJob(uuidv7())).rejects.toBeInstanceOf(RequestTimeoutError);
      expect(silent.seen).toHaveLength(1);
    } finally {
      await broken.close();
      await silent.close();
    }
  });

  it('long-polls in chunks of at most 30 s', async () => {
    const fake = await fakeService([(_req, res) => json(res, 200, job('succeeded'))]);
    try {
      const client = new OnejobClient({ baseUrl: fake.url, apiKey: 'k' });
      await client.waitForJob(uuidv7(), { timeoutMs: 600_000 });
      expect(fake.seen[0].headers.prefer).toBe('wait=30');
    } finally {
      await fake.close();
    }
  });
});

describe('uuidv7', () => {
  it('is version 7, variant 10, and starts with the milliseconds it was made at', () => {
    const now = Date.UTC(2026, 0, 2, 3, 4, 5, 678);
    const id = uuidv7(now);
    expect(id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    expect(parseInt(id.replace(/-/g, '').slice(0, 12), 16)).toBe(now);
    expect(new Set(Array.from({ length: 1000 }, () => uuidv7(now))).size).toBe(1000);
  });
});
