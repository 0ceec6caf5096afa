import { execFileSync } from 'node:child_process';
import { createSocket } from 'node:dgram';
import { lookup } from 'node:dns/promises';
import { closeSync, mkdtempSync, openSync } from 'node:fs';
import { type FileHandle, open } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

import { FakeOpenAiServer } from './fakes/fake-openai.server.js';
import { bearer, startTestApp, type TestApp } from './helpers/app.js';
import { writeCatalog } from './helpers/catalog.js';
import { sleep, waitFor } from './helpers/wait.js';

// Issue 22, the provider call: deadlines that hold under garbage collection (item 1), names resolved off the
// thread pool (item 3), a provider's answer read with a size limit (item 4). docs/testing.md lists each case.

// A forced full collection, without starting the test process with --expose-gc (as src/common/deadline.spec.ts).
setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

type AttemptBody = {
  id: string;
  provider: string;
  status: string;
  error: { reason: string } | null;
  startedAt: string;
  finishedAt: string | null;
};
type JobBody = {
  id: string;
  status: string;
  error: { reason: string } | null;
  result: unknown;
  attempts: AttemptBody[];
};

const openAiProvider = (name: string, baseUrl: string, more: object = {}) => ({
  name,
  kind: 'openai',
  model: 'gpt-4o-mini',
  baseUrl,
  apiKeyEnv: 'FAKE_OPENAI_KEY',
  timeoutMs: 500,
  hardTimeoutMs: 1500,
  maxAttempts: 1,
  ...more,
});

/**
 * Takes every thread of libuv's pool: each opens a FIFO that has no writer, which blocks in open(2) until
 * `release` gives it one. That is what eight names whose DNS server never answers do to `dns.lookup`.
 */
async function saturateThreadPool(): Promise<{ release: () => Promise<void> }> {
  const dir = mkdtempSync(join(tmpdir(), 'onejob-pool-'));
  const size = Number(process.env.UV_THREADPOOL_SIZE ?? 4);
  const fifos = Array.from({ length: size }, (_, i) => join(dir, `fifo-${i}`));
  execFileSync('mkfifo', fifos);
  const readers = fifos.map((fifo) => open(fifo, 'r'));
  return {
    release: async () => {
      // O_RDWR on a FIFO never blocks on Linux, and is a writer: every blocked open returns.
      const writers = fifos.map((fifo) => openSync(fifo, 'r+'));
      for (const handle of await Promise.all<FileHandle>(readers)) await handle.close();
      writers.forEach((fd) => closeSync(fd));
    },
  };
}

describe('the provider call (issue 22 items 1, 3 and 4)', () => {
  let fake: FakeOpenAiServer;
  let t: TestApp;
  const dns = createSocket('udp4');
  const queries: Buffer[] = [];
  beforeAll(async () => {
    process.env.FAKE_OPENAI_KEY = 'sk-fake';
    fake = await new FakeOpenAiServer().start();
    dns.on('message', (message) => queries.push(message));
    await new Promise<void>((resolve) => dns.bind(0, '127.0.0.1', resolve));
    const port = new URL(fake.url).port;
    const catalogFile = writeCatalog((c) => {
      c.providers.push(openAiProvider('fake-drip', fake.url));
      c.providers.push(
        openAiProvider('fake-dns', `http://never-resolves.test:${port}/v1`, {
          timeoutMs: 2000,
          hardTimeoutMs: 3000,
          maxAttempts: 2,
        }),
      );
      c.providers.push(openAiProvider('fake-large', fake.url, { timeoutMs: 5000, hardTimeoutMs: 10_000 }));
      // 200 kB: allowed by the 1 MiB default, too large for a list page. 2 MB: past the limit.
      c.providers.push({
        name: 'sim-big',
        kind: 'simulated',
        model: 'big',
        timeoutMs: 2000,
        simulate: { latencyMs: 5, responseBytes: 200_000 },
      });
      c.providers.push({
        name: 'sim-huge',
        kind: 'simulated',
        model: 'huge',
        timeoutMs: 2000,
        simulate: { latencyMs: 5, responseBytes: 2_000_000 },
      });
    });
    // One worker slot: a call that outlives its hard deadline holds the only slot of the process (item 1). The
    // DNS servers are a socket that never answers (item 3); the fake's own address is an IP and asks no one.
    t = await startTestApp({
      role: 'all',
      catalogFile,
      workerConcurrency: 1,
      workerPollMs: 20,
      reconcileIntervalMs: 200,
      dnsServers: [`127.0.0.1:${dns.address().port}`],
      dnsTimeoutMs: 300,
    });
  });
  afterAll(async () => {
    await t?.close();
    dns.close();
    await fake.stop();
  });
  beforeEach(() => fake.reset());

  async function owner() {
    const key = await t.key('owner-calls', ['jobs:write', 'jobs:read']);
    return {
      create: async (providers: string[], text = `job ${Math.random()}`) => {
        const res = await t
          .http()
          .post('/v1/jobs')
          .set(bearer(key))
          .set('Idempotency-Key', `k-${Math.random()}`)
          .send({ operation: 'summarize', input: { text }, providers });
        expect(res.status).toBe(201);
        return res.body as JobBody;
      },
      job: async (id: string) => (await t.http().get(`/v1/jobs/${id}`).set(bearer(key))).body as JobBody,
      list: (query = '') => t.http().get(`/v1/jobs${query}`).set(bearer(key)),
    };
  }

  describe('item 1: a body that drips after its headers, with a collection during the call', () => {
    it("ends the call at hardTimeoutMs after a GC, frees the slot, and another provider's job runs", async () => {
      const o = await owner();
      fake.always({ kind: 'drip', intervalMs: 200 });
      const dripping = await o.create(['fake-drip']);
      // The headers are out and the SDK's own timeout is cleared: only our deadlines bound the body read now.
      await waitFor(
        async () => fake.requests[0]?.answeredAt,
        (at) => at !== undefined,
        10_000,
      );
      await sleep(100);
      gc();
      await sleep(50);
      gc();
      const other = await o.create(['sim-primary']);
      // Without a deadline that survives the collection the drip never ends, and the one slot stays taken.
      const done = await waitFor(
        () => o.job(other.id),
        (j) => j.status === 'succeeded',
        10_000,
      );
      const cut = fake.requests[0];
      expect(cut.closedAt).toBeDefined();
      // The client cut the drip off at its hard deadline (1.5 s), well before the 10 s this test waits.
      expect(cut.closedAt! - cut.at).toBeLessThan(6_000);
      // It ran once the slot was free: after the drip's call ended, not beside it.
      expect(new Date(done.attempts[0].startedAt).getTime()).toBeGreaterThanOrEqual(cut.closedAt! - 500);
      // A hard timeout after the request was sent is ambiguous (I4): unknown, never failed.
      const held = await o.job(dripping.id);
      expect(held.attempts[0]).toMatchObject({ provider: 'fake-drip', status: 'unknown' });
      expect(held.status).toBe('unknown');
    });
  });

  describe("item 1: the runner's own hard deadline, for an adapter that has none of its own", () => {
    it('ends a simulated call that never answers at its hard deadline after a GC, and frees the slot', async () => {
      const o = await owner();
      // sim-hang waits on the runner's signal alone (timeoutMs 300, hardTimeoutMs 1000 in the test catalog).
      const hanging = await o.create(['sim-hang']);
      await waitFor(
        () => o.job(hanging.id),
        (j) => j.attempts.length === 1,
        5_000,
      );
      gc();
      await sleep(50);
      gc();
      const other = await o.create(['sim-primary']);
      await waitFor(
        () => o.job(other.id),
        (j) => j.status === 'succeeded',
        10_000,
      );
      expect((await o.job(hanging.id)).attempts[0]).toMatchObject({ provider: 'sim-hang', status: 'unknown' });
    });
  });

  describe('item 3: a provider addressed by a name whose DNS server never answers, the thread pool taken', () => {
    it('fails the attempts as a refused connection (never unknown: nothing was sent) and the job moves on', async () => {
      const o = await owner();
      const pool = await saturateThreadPool();
      try {
        // The pool is really taken: a lookup through it does not answer.
        const through = lookup('localhost').then(() => 'answered');
        await expect(Promise.race([through, sleep(300).then(() => 'stalled')])).resolves.toBe('stalled');
        const job = await o.create(['fake-dns']);
        const settled = await waitFor(
          () => o.job(job.id),
          (j) => ['succeeded', 'failed', 'cancelled'].includes(j.status) || j.status === 'unknown',
          15_000,
        );
        expect(settled.status).toBe('failed');
        expect(settled.attempts).toHaveLength(2);
        for (const attempt of settled.attempts) {
          expect(attempt).toMatchObject({
            status: 'failed',
            error: expect.objectContaining({
              reason: 'connection_refused',
              message: expect.stringContaining('ETIMEOUT'),
            }),
          });
        }
        // Resolved by the DNS servers of DNS_SERVERS (c-ares, off the pool), and nothing reached the provider.
        expect(queries.some((q) => q.includes(Buffer.from('never-resolves')))).toBe(true);
        expect(fake.requests).toHaveLength(0);
      } finally {
        await pool.release();
      }
    });
  });

  describe('item 4: a size limit on the answer, and list pages without large results', () => {
    const terminal = (j: JobBody) => ['succeeded', 'failed', 'cancelled'].includes(j.status);

    it('cuts a 20 MB answer off past maxResponseBytes (1 MiB): the attempt fails response_too_large, the job fails', async () => {
      const o = await owner();
      fake.always({ kind: 'large', bytes: 20_000_000 });
      const rssBefore = process.memoryUsage().rss;
      const job = await o.create(['fake-large']);
      const settled = await waitFor(() => o.job(job.id), terminal, 20_000);
      expect(settled.attempts).toHaveLength(1);
      expect(settled.attempts[0]).toMatchObject({
        status: 'failed',
        error: expect.objectContaining({ reason: 'response_too_large' }),
      });
      expect(settled).toMatchObject({ status: 'failed', result: null });
      // Read as a stream and cut off: the fake wrote a few socket buffers' worth, not the 20 MB.
      const served = fake.requests[0];
      await waitFor(
        async () => served.closedAt,
        (at) => at !== undefined,
        5_000,
      );
      expect(served.bytesWritten!).toBeLessThan(8_000_000);
      expect(process.memoryUsage().rss - rssBefore).toBeLessThan(150_000_000);
    });

    it('fails a simulated answer past the limit the same way, and the job moves on to nothing stuck', async () => {
      const o = await owner();
      const job = await o.create(['sim-huge']);
      const settled = await waitFor(() => o.job(job.id), terminal, 10_000);
      expect(settled.status).toBe('failed');
      expect(settled.attempts.map((a) => [a.status, a.error?.reason])).toEqual([['failed', 'response_too_large']]);
    });

    it('leaves a large result out of list pages (resultOmitted), while the job itself carries it', async () => {
      const o = await owner();
      const small = await o.create(['sim-primary']);
      const big = await o.create(['sim-big']);
      const done = await waitFor(() => o.job(big.id), terminal, 10_000);
      await waitFor(() => o.job(small.id), terminal, 10_000);
      expect(done.status).toBe('succeeded');
      expect(JSON.stringify(done.result).length).toBeGreaterThanOrEqual(199_000);
      const page = await o.list('?limit=10');
      expect(page.status).toBe(200);
      expect(page.text.length).toBeLessThan(50_000);
      const items = page.body.items as Array<{ id: string; result: unknown; resultOmitted: boolean }>;
      expect(items.find((j) => j.id === big.id)).toMatchObject({ result: null, resultOmitted: true });
      expect(items.find((j) => j.id === small.id)).toMatchObject({
        result: { summary: expect.any(String) },
        resultOmitted: false,
      });
      const ops = await t.key('operator', ['ops:read']);
      const opsPage = await t.http().get('/v1/ops/jobs?limit=10').set(bearer(ops));
      expect(opsPage.status).toBe(200);
      expect(opsPage.text.length).toBeLessThan(50_000);
      expect((opsPage.body.items as Array<{ id: string }>).find((j) => j.id === big.id)).toMatchObject({
        result: null,
        resultOmitted: true,
      });
    });
  });
});
