import pg from 'pg';
import type { Response } from 'supertest';

import { bearer, startTestApp, type TestApp } from './helpers/app.js';
import { waitFor } from './helpers/wait.js';

const items = (prefix: string, n: number) =>
  Array.from({ length: n }, (_, i) => ({ key: `${prefix}-${i}`, operation: 'summarize', input: { text: `${i}` } }));

/** Every tracked request, awaited after each test (a failed test must not leave writes behind for the next). */
const inFlight: Promise<unknown>[] = [];

/** A request in flight, and its answer once it came. */
function track(request: PromiseLike<Response>) {
  const tracked: { answer?: Response; done: Promise<Response> } = { done: Promise.resolve(request) };
  void tracked.done.then((answer) => (tracked.answer = answer));
  inFlight.push(tracked.done.catch(() => undefined));
  return tracked;
}

describe('batch creates are admitted up to MAX_CONCURRENT_BATCHES, per process and per owner (503 beyond)', () => {
  let t: TestApp;
  // A connection of its own, outside the app's pool: it holds one key of every batch, so they wait in their writes.
  let blocker: pg.Client;
  // And one to watch from: the app's pool may be what is exhausted.
  let observer: pg.Client;

  beforeAll(async () => {
    t = await startTestApp({ dbPoolSize: 10, maxConcurrentBatches: 2, maxConcurrentBatchesPerOwner: 1 });
  }, 60_000);
  afterAll(async () => {
    await t.close();
  });
  beforeEach(async () => {
    await t.truncate();
    blocker = new pg.Client({ connectionString: t.database.url });
    await blocker.connect();
    await blocker.query('BEGIN');
    observer = new pg.Client({ connectionString: t.database.url });
    await observer.connect();
  });
  afterEach(async () => {
    await blocker.end();
    await observer.end();
    await Promise.all(inFlight.splice(0));
  });

  /** The blocker takes `${prefix}-3` of each owner: that owner's batch then waits on it, holding its connection. */
  const hold = (owners: string[], prefix: string) =>
    blocker.query(
      `INSERT INTO jobs (owner_id, idempotency_key, fingerprint, operation, input, providers)
       SELECT o, $2, repeat('f', 64), 'summarize', '{"text":"x"}', '{sim-primary}' FROM unnest($1::text[]) o`,
      [owners, `${prefix}-3`],
    );
  const waiters = async () => {
    const { rows } = await observer.query(
      `SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%INTO jobs%'`,
    );
    return rows[0].n as number;
  };
  const batch = (apiKey: string, batchKey: string, prefix: string, n = 500) =>
    t
      .http()
      .post('/v1/batches')
      .set(bearer(apiKey))
      .set('Idempotency-Key', batchKey)
      .send({ items: items(prefix, n) });

  it("answers 503 + Retry-After past the process's bound, admits the rest, and another owner's create runs", async () => {
    const owners = Array.from({ length: 12 }, (_, i) => `owner-admission-${i}`);
    const keys = await Promise.all(owners.map((owner) => t.key(owner)));
    const other = await t.key('owner-admission-single');
    await hold(owners, 'big');
    // Twelve big batches at once, each of its own owner: more than the pool's 10 connections.
    const batches = keys.map((key, i) => track(batch(key, `big-batch-${i}`, 'big')));
    const settled = () => batches.filter((r) => r.answer).length;
    await waitFor(
      async () => ({ settled: settled(), waiting: await waiters() }),
      (s) => s.settled >= 10 || s.waiting >= 9,
    );
    const refused = batches.filter((r) => r.answer).map((r) => r.answer!);
    expect(refused.map((r) => r.status)).toEqual(Array(10).fill(503));
    for (const answer of refused) {
      expect(answer.body.code).toBe('service_unavailable');
      expect(answer.body.detail).toMatch(/MAX_CONCURRENT_BATCHES/);
      expect(Number(answer.headers['retry-after'])).toBeGreaterThan(0);
    }
    // The two admitted reach their write and wait there (the refusals may come first: they read no body).
    await waitFor(waiters, (n) => n === 2);

    // While two batches hold their connections and locks, another owner's single create is not kept waiting.
    const started = Date.now();
    const single = await t
      .http()
      .post('/v1/jobs')
      .set(bearer(other))
      .set('Idempotency-Key', 'single')
      .send({ operation: 'summarize', input: { text: 'not starved' } });
    expect(single.status).toBe(201);
    expect(Date.now() - started).toBeLessThan(2_000);

    await blocker.query('ROLLBACK');
    const admitted = (await Promise.all(batches.map((r) => r.done))).filter((r) => r.status !== 503);
    expect(admitted.map((r) => r.status)).toEqual([201, 201]);
    const [{ n }] = await t.dataSource.query('SELECT count(*)::int AS n FROM batches');
    expect(n).toBe(2);
    // Every slot is given back: a refused owner's batch is admitted now.
    const refusedOwner = keys[batches.findIndex((r) => r.answer!.status === 503)];
    expect((await batch(refusedOwner, 'big-batch-again', 'big')).status).toBe(201);
  }, 60_000);

  it("answers an owner's second concurrent batch 503 while another owner's batch is admitted", async () => {
    const [a, b] = await Promise.all([t.key('owner-admission-a'), t.key('owner-admission-b')]);
    await hold(['owner-admission-a', 'owner-admission-b'], 'own');
    const first = track(batch(a, 'own-1', 'own'));
    await waitFor(waiters, (n) => n >= 1);
    const second = await batch(a, 'own-2', 'own-second');
    expect(second.status).toBe(503);
    expect(second.body.detail).toMatch(/MAX_CONCURRENT_BATCHES_PER_OWNER/);
    expect(Number(second.headers['retry-after'])).toBeGreaterThan(0);
    const neighbour = track(batch(b, 'own-b', 'own'));
    await waitFor(waiters, (n) => n >= 2);
    await blocker.query('ROLLBACK');
    expect((await first.done).status).toBe(201);
    expect((await neighbour.done).status).toBe(201);
    // A refused validation gives its slot back too.
    expect((await t.http().post('/v1/batches').set(bearer(a)).set('Idempotency-Key', 'bad').send({})).status).toBe(422);
    expect((await batch(a, 'own-3', 'own-third')).status).toBe(201);
  }, 60_000);
});
