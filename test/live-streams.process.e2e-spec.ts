import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { type EmbeddedDatabase, freePort, startEmbeddedPostgres } from '../src/database/embedded-postgres.js';
import { provider, writeCatalog } from './helpers/catalog.js';
import { type ServiceProcess, spawnService, waitUntilReady } from './helpers/process.js';
import { follow, type Follower } from './helpers/sse.js';
import { sleep, waitFor } from './helpers/wait.js';
import { createKey } from './race/target.js';

/**
 * I12 across processes: the events are committed by a ROLE=worker process and streamed by a ROLE=api process on
 * the same database (the NOTIFY crosses between them), and a PostgreSQL restart in the middle of the jobs is
 * absorbed by the service: each stream stays open and delivers every event once, in order.
 */
describe('live streams across processes and through a PostgreSQL restart', () => {
  let dir: string;
  let port: number;
  let database: EmbeddedDatabase;
  let api: ServiceProcess;
  let worker: ServiceProcess;
  let key: string;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'onejob-streams-'));
    chmodSync(dir, 0o777);
    port = await freePort();
    database = await startEmbeddedPostgres({ dataDir: dir, database: 'onejob', port });
    // Calls long enough that the jobs are in flight when the database goes away, with room to settle after.
    const catalog = writeCatalog((c) => {
      Object.assign(provider(c, 'sim-primary'), { timeoutMs: 20_000, hardTimeoutMs: 40_000 });
      provider(c, 'sim-primary').simulate.latencyMs = 2500;
    });
    const env = { DATABASE_URL: database.url, CATALOG_FILE: catalog, DB_POOL_SIZE: '6', STREAM_GRACE_MS: '300' };
    api = await spawnService({ ...env, ROLE: 'api' });
    worker = await spawnService({ ...env, ROLE: 'worker', WORKER_POLL_MS: '50', RECONCILE_INTERVAL_MS: '200' });
    await Promise.all([waitUntilReady(api), waitUntilReady(worker)]);
    key = createKey(database.url, 'owner-live', 'jobs:write,jobs:read');
  }, 90_000);

  afterAll(async () => {
    for (const service of [api, worker]) {
      service?.kill();
      await service?.exited;
    }
    await database?.stop();
    rmSync(dir, { recursive: true, force: true });
  }, 60_000);

  const headers = () => ({ Authorization: `Bearer ${key}`, 'Content-Type': 'application/json' });

  async function createJobs(n: number): Promise<string[]> {
    return Promise.all(
      Array.from({ length: n }, async (_, i) => {
        const res = await fetch(`${api.baseUrl}/v1/jobs`, {
          method: 'POST',
          headers: { ...headers(), 'Idempotency-Key': `live-${Date.now()}-${i}` },
          body: JSON.stringify({ operation: 'summarize', input: { text: `job ${i}` } }),
        });
        expect(res.status).toBe(201);
        return ((await res.json()) as { id: string }).id;
      }),
    );
  }

  async function timeline(jobId: string): Promise<string[]> {
    const res = await fetch(`${api.baseUrl}/v1/jobs/${jobId}/events?limit=500`, { headers: headers() });
    return ((await res.json()) as { items: Array<{ id: string }> }).items.map((e) => e.id);
  }

  async function expectWhole(jobIds: string[], followers: Follower[]): Promise<void> {
    await Promise.all(followers.map((f) => f.over));
    for (const [i, follower] of followers.entries()) {
      follower.close();
      expect(follower.messages.map((m) => m.id)).toEqual(await timeline(jobIds[i]));
      expect(follower.messages.at(-1)?.event).toBe('job.succeeded');
      // One connection for the stream, one more that heard 204 after its end: the service never dropped it.
      expect(follower.connections).toHaveLength(2);
    }
  }

  it('streams from a ROLE=api process what a ROLE=worker process commits, each event once, in order', async () => {
    const jobIds = await createJobs(5);
    const followers = jobIds.map((id) => follow(`${api.baseUrl}/v1/jobs/${id}/events`, key));
    await expectWhole(jobIds, followers);
  }, 60_000);

  it('keeps 20 streams whole through a PostgreSQL restart: resumed by the service, not the client', async () => {
    const jobIds = await createJobs(20);
    const followers = jobIds.map((id) => follow(`${api.baseUrl}/v1/jobs/${id}/events`, key));
    // Every job is claimed and called (running) before the database goes.
    await waitFor(
      async () => followers.filter((f) => f.messages.some((m) => m.event === 'attempt.running')).length,
      (n) => n === followers.length,
      20_000,
    );
    await database.stop();
    await sleep(1500);
    database = await startEmbeddedPostgres({ dataDir: dir, database: 'onejob', port });
    await expectWhole(jobIds, followers);
  }, 90_000);
});
