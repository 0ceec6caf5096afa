import pg from 'pg';

import { LedgerFactory } from '../src/ledger/ledger.js';
import { postJob } from './factories/index.js';
import { bearer, startTestApp, type TestApp } from './helpers/app.js';
import { writeCatalog } from './helpers/catalog.js';
import { follow, idsOf, openStream, readRaw } from './helpers/sse.js';
import { startTcpProxy } from './helpers/tcp-proxy.js';
import { waitFor } from './helpers/wait.js';

/** The job's whole timeline by the JSON pages (unchanged for clients that do not ask for a stream). */
async function timeline(t: TestApp, key: string, jobId: string): Promise<string[]> {
  const res = await t.http().get(`/v1/jobs/${jobId}/events?limit=500`).set(bearer(key)).expect(200);
  expect(res.headers['content-type']).toMatch(/^application\/json/);
  return (res.body as { items: Array<{ id: string }> }).items.map((e) => e.id);
}

describe('a live stream of a job (GET /v1/jobs/:id/events, Accept: text/event-stream)', () => {
  let t: TestApp;
  let key: string;

  beforeAll(async () => {
    // A provider slow enough that the stream is open before the job ends.
    const catalogFile = writeCatalog((c) => {
      const simulate = { latencyMs: 700, outcome: 'success' };
      c.providers.push({ name: 'sim-slow', kind: 'simulated', model: 'sim-s', timeoutMs: 5000, simulate });
    });
    t = await startTestApp({
      role: 'all',
      catalogFile,
      workerPollMs: 20,
      streamGraceMs: 300,
      streamHeartbeatMs: 150,
      maxStreams: 6,
      maxStreamsPerOwner: 3,
    });
    key = await t.key('owner-stream');
  }, 60_000);

  afterAll(async () => {
    await t?.close();
  });

  it('sends the timeline so far, then each event as it commits, each once, in id order, then stops', async () => {
    const jobId = (await postJob(t, key, { providers: ['sim-slow'] })).id;
    const follower = follow(`${t.baseUrl}/v1/jobs/${jobId}/events`, key);
    await follower.over;
    follower.close();
    const ids = follower.messages.map((m) => m.id);
    expect(ids).toEqual(await timeline(t, key, jobId));
    const created = { subject: 'job', to: 'pending', reason: 'created' };
    expect(follower.messages[0]).toMatchObject({ event: 'job.pending', data: created });
    expect(follower.messages.at(-1)?.event).toBe('job.succeeded');
    // The stream was open while the job ran: events came after the first connection, and it ended by itself.
    expect(ids.length).toBeGreaterThanOrEqual(5);
    expect(follower.connections[0]).toBeUndefined();
  });

  it('resumes after Last-Event-ID with no gap and no repeat when the connection drops mid-job', async () => {
    const proxy = await startTcpProxy('127.0.0.1', Number(new URL(t.baseUrl).port));
    try {
      const jobId = (await postJob(t, key, { providers: ['sim-slow'] })).id;
      const follower = follow(`http://127.0.0.1:${proxy.port}/v1/jobs/${jobId}/events`, key);
      await waitFor(
        async () => follower.messages.length,
        (n) => n >= 1,
      );
      await proxy.cut();
      await proxy.restore();
      await follower.over;
      follower.close();
      const ids = follower.messages.map((m) => m.id);
      expect(ids).toEqual(await timeline(t, key, jobId));
      expect(new Set(ids).size).toBe(ids.length);
      // It came back by itself, saying where it was: the last message it had when it reconnected (messages in
      // flight when the proxy cut the connection may still arrive after the cut, so not a count taken at the cut).
      expect(follower.connections.length).toBeGreaterThanOrEqual(2);
      expect(follower.receivedAtConnection[1]).toBeGreaterThanOrEqual(1);
      expect(follower.connections[1]).toBe(ids[follower.receivedAtConnection[1] - 1]);
    } finally {
      await proxy.close();
    }
  });

  it('resumes after ?lastEventId= as after the header; 204 once a finished job has nothing more', async () => {
    const jobId = (await postJob(t, key)).id;
    const status = () =>
      t
        .http()
        .get(`/v1/jobs/${jobId}`)
        .set(bearer(key))
        .then((r) => r.body.status as string);
    await waitFor(status, (s) => s === 'succeeded');
    const all = await timeline(t, key, jobId);
    const url = `${t.baseUrl}/v1/jobs/${jobId}/events`;
    const resumed = await readRaw(`${url}?lastEventId=${all[1]}`, bearer(key), () => false);
    expect(resumed.status).toBe(200);
    expect(resumed.headers['content-type']).toMatch(/^text\/event-stream/);
    expect(resumed.headers['cache-control']).toBe('no-cache');
    expect(resumed.headers['x-accel-buffering']).toBe('no');
    expect(idsOf(resumed.text)).toEqual(all.slice(2));
    await waitFor(
      () => readRaw(url, { ...bearer(key), 'Last-Event-ID': all.at(-1)! }, () => false).then((r) => r.status),
      (status) => status === 204,
    );
    const bad = await t
      .http()
      .get(`/v1/jobs/${jobId}/events`)
      .set(bearer(key))
      .set('Accept', 'text/event-stream')
      .set('Last-Event-ID', 'x1');
    expect(bad.status).toBe(400);
    expect(bad.body).toMatchObject({ code: 'validation_failed', errors: [{ field: 'Last-Event-ID' }] });
  });

  it("answers 404 for another owner's job (I7), and streams any owner's job to ops:read", async () => {
    const jobId = (await postJob(t, key, { providers: ['sim-slow'] })).id;
    const stranger = await t.key('owner-other', ['jobs:read']);
    const refused = await t
      .http()
      .get(`/v1/jobs/${jobId}/events`)
      .set(bearer(stranger))
      .set('Accept', 'text/event-stream');
    expect(refused.status).toBe(404);
    expect(refused.body.code).toBe('not_found');
    const operator = await t.key('operator', ['ops:read']);
    const url = `${t.baseUrl}/v1/jobs/${jobId}/events`;
    const seen = await readRaw(url, bearer(operator), (text) => idsOf(text).length >= 1);
    expect(seen.status).toBe(200);
    expect(idsOf(seen.text).length).toBeGreaterThanOrEqual(1);
  });

  it('sends a heartbeat comment while nothing happens', async () => {
    const parked = await t.key('owner-parked');
    const jobId = (await postJob(t, parked, { providers: ['sim-hang'] })).id;
    const url = `${t.baseUrl}/v1/jobs/${jobId}/events`;
    const seen = await readRaw(url, bearer(parked), (text) => text.includes(': heartbeat\n\n'));
    expect(seen.text).toMatch(/^retry: \d+\n\n/);
    expect(seen.text).toContain(': heartbeat\n\n');
  });

  it('refuses past MAX_STREAMS_PER_OWNER and MAX_STREAMS (503, Retry-After); a client leaving frees one', async () => {
    const owners = [await t.key('limit-a'), await t.key('limit-b')];
    const jobs = await Promise.all(
      owners.map(async (k) => (await postJob(t, k, { providers: ['sim-hang'] })).id as string),
    );
    const open: Array<() => void> = [];
    const hold = async (i: number) => {
      const stream = await openStream(`${t.baseUrl}/v1/jobs/${jobs[i]}/events`, bearer(owners[i]));
      if (stream.status === 200) open.push(stream.close);
      else stream.close();
      return stream;
    };
    try {
      for (let n = 0; n < 3; n++) expect((await hold(0)).status).toBe(200);
      const perOwner = await hold(0);
      expect(perOwner.status).toBe(503);
      expect(perOwner.headers['retry-after']).toMatch(/^\d+$/);
      for (let n = 0; n < 3; n++) expect((await hold(1)).status).toBe(200);
      // Six streams are open in this process now (MAX_STREAMS): another owner is refused too.
      const stranger = await t.key('limit-c');
      const third = (await postJob(t, stranger, { providers: ['sim-hang'] })).id;
      const full = await openStream(`${t.baseUrl}/v1/jobs/${third}/events`, bearer(stranger));
      full.close();
      expect(full.status).toBe(503);
      open.shift()!();
      await waitFor(
        async () => (await hold(0)).status,
        (status) => status === 200,
      );
    } finally {
      for (const close of open) close();
    }
  });
});

describe('a job events writer that does not lock the job (the running mark) commits in id order', () => {
  let t: TestApp;

  beforeAll(async () => {
    t = await startTestApp({ role: 'api', streamSweepMs: 100, streamGraceMs: 100 });
  }, 60_000);

  afterAll(async () => {
    await t?.close();
  });

  it('a stream misses no event when the running mark races another writer of the same job (I12)', async () => {
    const key = await t.key('owner-order');
    const jobId = (await postJob(t, key)).id;
    const queued = await t.http().post(`/v1/jobs/${jobId}/attempts`).set(bearer(key)).send({}).expect(201);
    const attempts = queued.body.attempts as Array<{ id: string; status: string }>;
    const attemptId = attempts.find((a) => a.status === 'starting')!.id;
    const follower = follow(`${t.baseUrl}/v1/jobs/${jobId}/events`, key);
    await waitFor(
      async () => follower.messages.length,
      (n) => n >= 2,
    );

    // Another writer of the job (as the Ledger writes: the job's row lock first, its event at the end) is under way.
    const holder = new pg.Client({ connectionString: t.database.url });
    await holder.connect();
    let heldId: string;
    try {
      await holder.query('BEGIN');
      await holder.query('SELECT 1 FROM jobs WHERE id = $1 FOR UPDATE', [jobId]);
      let marked = false;
      const call = { id: attemptId, timeoutMs: 60_000, hardTimeoutMs: 60_000 };
      const mark = t.app
        .get(LedgerFactory)
        .markRunning([call])
        .then((r) => {
          marked = true;
          return r;
        });
      await new Promise((r) => setTimeout(r, 400));
      expect(marked).toBe(false);
      const held = await holder.query(
        `INSERT INTO job_events (job_id, subject, from_status, to_status, reason)
         VALUES ($1, 'job', 'pending', 'pending', 'waiting_for_capacity') RETURNING id::text`,
        [jobId],
      );
      heldId = held.rows[0].id as string;
      await holder.query('COMMIT');
      expect(await mark).toHaveLength(1);
    } finally {
      await holder.end();
    }
    // The mark committed after the other writer: its event must have the larger id, or a stream that read in
    // between would have skipped it for good.
    const rows = await t.dataSource.query(
      `SELECT id::text AS id FROM job_events WHERE job_id = $1 AND reason = 'provider_called'`,
      [jobId],
    );
    expect(BigInt(rows[0].id)).toBeGreaterThan(BigInt(heldId));
    const all = await timeline(t, key, jobId);
    await waitFor(
      async () => follower.messages.length,
      (n) => n >= all.length,
    );
    follower.close();
    expect(follower.messages.map((m) => m.id)).toEqual(all);
  });
});
