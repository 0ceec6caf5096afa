import { createSocket, type Socket } from 'node:dgram';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

import { jest } from '@jest/globals';
import { Webhook } from 'standardwebhooks';

import type { Env } from '../src/config/env.js';
import { WebhookDeliveriesRepository } from '../src/webhooks/webhook-deliveries.repository.js';
import { WebhookDispatcher } from '../src/webhooks/webhook-dispatcher.js';
import { WebhookHostLookup } from '../src/webhooks/webhook-http.js';
import { bearer, startTestApp, type TestApp } from './helpers/app.js';
import { sleep, waitFor } from './helpers/wait.js';
import { startReceiver } from './helpers/webhook-receiver.js';

// A forced full collection inside jest (see src/common/deadline.spec.ts).
setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

/** Only the API: the tests drive the dispatcher by hand (claimDue, send) to control what happens when. */
const apiEnv = (receiverUrl: string, extra: Partial<Env> = {}): Partial<Env> => ({
  role: 'api',
  webhookAllowedHosts: [new URL(receiverUrl).host],
  webhookTimeoutMs: 300,
  ...extra,
});

async function subscribe(t: TestApp, key: string, url: string, events = ['job.cancelled']) {
  const res = await t.http().post('/v1/webhooks').set(bearer(key)).send({ url, events });
  expect(res.status).toBe(201);
  return res.body as { id: string; secret: string };
}

/** A cancelled job: one job.cancelled delivery per subscribed endpoint of the owner, due now. */
async function cancelledJob(t: TestApp, key: string, idempotencyKey: string): Promise<string> {
  const created = await t
    .http()
    .post('/v1/jobs')
    .set(bearer(key))
    .set('Idempotency-Key', idempotencyKey)
    .send({ operation: 'summarize', input: { text: idempotencyKey } });
  expect(created.status).toBe(201);
  expect((await t.http().post(`/v1/jobs/${created.body.id}/cancel`).set(bearer(key))).status).toBe(200);
  return created.body.id as string;
}

const attemptsOf = (t: TestApp, jobId: string) =>
  t.dataSource.query(
    `SELECT a.status_code, a.error, a.latency_ms FROM webhook_delivery_attempts a JOIN webhook_deliveries d ON d.id = a.delivery_id
      WHERE d.job_id = $1 ORDER BY a.id`,
    [jobId],
  );

/** A DNS server that reads every query and never answers (as in src/common/host-lookup.spec.ts). */
async function silentDnsServer(): Promise<{ socket: Socket; address: string; queried: string[] }> {
  const queried: string[] = [];
  const socket = createSocket('udp4');
  // The question's name, label by label, right after the 12-byte header.
  socket.on('message', (message: Buffer) => {
    const labels: string[] = [];
    for (let i = 12; i < message.length && message[i] !== 0; i += message[i] + 1) {
      labels.push(message.subarray(i + 1, i + 1 + message[i]).toString());
    }
    queried.push(labels.join('.'));
  });
  await new Promise<void>((resolve) => socket.bind(0, '127.0.0.1', resolve));
  return { socket, address: `127.0.0.1:${socket.address().port}`, queried };
}

describe('webhooks hardening', () => {
  it('times a delivery out at WEBHOOK_TIMEOUT_MS although a garbage collection ran during the call', async () => {
    const receiver = await startReceiver(() => 'hold');
    const t = await startTestApp(apiEnv(receiver.url));
    try {
      const key = await t.key('owner-gc');
      await subscribe(t, key, receiver.url);
      const jobId = await cancelledJob(t, key, 'gc');
      const claimed = await t.app.get(WebhookDeliveriesRepository).claimDue(10, 60_000);
      expect(claimed).toHaveLength(1);
      const sending = t.app.get(WebhookDispatcher).send(claimed[0]);
      while (receiver.received.length === 0) await sleep(10);
      // The request is in flight and its timeout armed: a full collection now must not disarm it.
      gc();
      gc();
      // 300 ms promised; 5 s is ample slack on a loaded machine and far below undici's 300 s headers timeout.
      const outcome = await Promise.race([sending.then(() => 'recorded'), sleep(5_000).then(() => 'still in flight')]);
      expect(outcome).toBe('recorded');
      const [attempt] = await attemptsOf(t, jobId);
      expect(attempt).toMatchObject({ status_code: null, error: 'timed out after 300 ms' });
    } finally {
      await t.close();
      await receiver.close();
    }
  }, 30_000);

  it('refuses at registration every IPv4-inside-IPv6 form of an internal address and the reserved ranges', async () => {
    const t = await startTestApp({ role: 'api' });
    try {
      const key = await t.key('owner-ssrf');
      const literals = [
        '[::7f00:1]',
        '[::ffff:0:7f00:1]',
        '[64:ff9b::7f00:1]',
        '[64:ff9b::a9fe:a9fe]',
        '[2002:7f00:1::]',
        '198.18.0.1',
        '192.0.0.1',
      ];
      for (const host of literals) {
        const res = await t
          .http()
          .post('/v1/webhooks')
          .set(bearer(key))
          .send({ url: `https://${host}/hook`, events: ['job.succeeded'] });
        expect({ host, status: res.status, code: res.body.code, field: res.body.errors?.[0]?.field }).toEqual({
          host,
          status: 422,
          code: 'validation_failed',
          field: 'url',
        });
      }
      expect(await t.dataSource.query('SELECT count(*)::int AS n FROM webhook_endpoints')).toEqual([{ n: 0 }]);
    } finally {
      await t.close();
    }
  }, 30_000);

  it('checks the address it connects to: a name public at registration and 127.0.0.1 at delivery is never connected', async () => {
    const receiver = await startReceiver(() => 200);
    const t = await startTestApp({ role: 'api', webhookTimeoutMs: 2_000 }); // nothing allowed: the address rules apply
    try {
      const key = await t.key('owner-rebind');
      // The rebinding resolver: whatever the URL check (checkWebhookUrl) asks sees a public address; any other
      // resolution, the one made to connect, gets 127.0.0.1. `localhost` as the name: the system's resolver says
      // 127.0.0.1 too, so a connect that did not go through a checked lookup would reach the receiver.
      jest
        .spyOn(t.app.get(WebhookHostLookup), 'resolve')
        .mockImplementation(async () => [
          new Error().stack?.includes('checkWebhookUrl')
            ? { address: '93.184.215.14', family: 4 as const }
            : { address: '127.0.0.1', family: 4 as const },
        ]);
      await subscribe(t, key, `https://localhost:${receiver.port}/hooks`);
      const jobId = await cancelledJob(t, key, 'rebind');
      const claimed = await t.app.get(WebhookDeliveriesRepository).claimDue(10, 60_000);
      await t.app.get(WebhookDispatcher).send(claimed[0]);
      expect(receiver.connections()).toBe(0);
      const [attempt] = await attemptsOf(t, jobId);
      expect(attempt).toMatchObject({
        status_code: null,
        error: expect.stringMatching(/^refused: .*loopback.*127\.0\.0\.1/),
      });
    } finally {
      await t.close();
      await receiver.close();
    }
  }, 30_000);

  it('answers registrations to names whose DNS never answers with a quick 422, holding up no other delivery', async () => {
    const dns = await silentDnsServer();
    const receiver = await startReceiver(() => 204);
    const receiverUrl = `http://localhost:${receiver.port}/hooks`;
    const t = await startTestApp({ ...apiEnv(receiverUrl), dnsServers: [dns.address], dnsTimeoutMs: 300 });
    try {
      const stalled = await t.key('owner-stalled');
      const other = await t.key('owner-other');
      await subscribe(t, other, receiverUrl);
      const jobId = await cancelledJob(t, other, 'other');
      const [claimed] = await t.app.get(WebhookDeliveriesRepository).claimDue(10, 60_000);

      const started = Date.now();
      const registrations = Array.from({ length: 8 }, (_, i) =>
        t
          .http()
          .post('/v1/webhooks')
          .set(bearer(stalled))
          .send({ url: `https://hangs-${i}.example/hook`, events: ['job.succeeded'] })
          .then((res) => ({ res, ms: Date.now() - started })),
      );
      // While the eight names hang, the other owner's delivery to a hosts-file name goes out at once.
      await t.app.get(WebhookDispatcher).send(claimed);
      const deliveredMs = Date.now() - started;
      const answered = await Promise.all(registrations);

      expect(receiver.accepted()).toHaveLength(1);
      expect(await attemptsOf(t, jobId)).toEqual([expect.objectContaining({ status_code: 204, error: null })]);
      for (const { res, ms } of answered) {
        expect(res.status).toBe(422);
        expect(res.body.errors).toEqual([{ field: 'url', message: 'host does not resolve' }]);
        // DNS_TIMEOUT_MS is 300: 3 s is ample slack, and far below the system resolver's retries (40 s seen).
        expect(ms).toBeLessThan(3_000);
      }
      // The names were asked of the configured server (the bounded resolver), not of the system's getaddrinfo.
      for (let i = 0; i < 8; i++) expect(dns.queried).toContain(`hangs-${i}.example`);
      expect(deliveredMs).toBeLessThan(2_000);
    } finally {
      await t.close();
      await receiver.close();
      dns.socket.close();
    }
  }, 30_000);

  it('reads one endpoint: GET /v1/webhooks/:id answers the list item to its owner, 404 to another owner', async () => {
    const t = await startTestApp({ role: 'api', webhookAllowedHosts: ['127.0.0.1:9'] });
    try {
      const key = await t.key('owner-read');
      const reader = await t.key('owner-read', ['jobs:read']);
      const stranger = await t.key('owner-stranger');
      const endpoint = await subscribe(t, key, 'http://127.0.0.1:9/hook', ['job.succeeded', 'job.failed']);
      const [listed] = (await t.http().get('/v1/webhooks').set(bearer(key))).body.items;

      const read = await t.http().get(`/v1/webhooks/${endpoint.id}`).set(bearer(reader));
      expect(read.status).toBe(200);
      expect(read.body).toEqual(listed);
      expect(JSON.stringify(read.body)).not.toContain('whsec_');
      const foreign = await t.http().get(`/v1/webhooks/${endpoint.id}`).set(bearer(stranger));
      expect(foreign.status).toBe(404);
      expect(foreign.body.code).toBe('not_found');
      expect((await t.http().get('/v1/webhooks/not-a-uuid').set(bearer(key))).status).toBe(400);
    } finally {
      await t.close();
    }
  }, 30_000);

  it('refuses endpoints past WEBHOOK_MAX_ENDPOINTS_PER_OWNER, atomically under concurrent registrations', async () => {
    const t = await startTestApp({ role: 'api', webhookAllowedHosts: ['127.0.0.1:9'], webhookMaxEndpointsPerOwner: 3 });
    try {
      const key = await t.key('owner-many');
      const other = await t.key('owner-few');
      const register = (k: string, i: number) =>
        t
          .http()
          .post('/v1/webhooks')
          .set(bearer(k))
          .send({ url: `http://127.0.0.1:9/hook-${i}`, events: ['job.succeeded'] });
      const answers = await Promise.all(Array.from({ length: 12 }, (_, i) => register(key, i)));
      expect(answers.filter((r) => r.status === 201)).toHaveLength(3);
      const refused = answers.filter((r) => r.status !== 201);
      expect(refused).toHaveLength(9);
      for (const r of refused) {
        expect(r.status).toBe(409);
        expect(r.body.code).toBe('webhook_endpoint_limit');
        expect(r.headers['content-type']).toMatch(/application\/problem\+json/);
      }
      expect(
        await t.dataSource.query(`SELECT count(*)::int AS n FROM webhook_endpoints WHERE owner_id = 'owner-many'`),
      ).toEqual([{ n: 3 }]);
      // Another owner has a limit of its own; a deleted endpoint frees its place.
      expect((await register(other, 0)).status).toBe(201);
      const [first] = (await t.http().get('/v1/webhooks').set(bearer(key))).body.items;
      expect((await t.http().delete(`/v1/webhooks/${first.id}`).set(bearer(key))).status).toBe(204);
      expect((await register(key, 99)).status).toBe(201);
    } finally {
      await t.close();
    }
  }, 30_000);

  it('shares the delivery slots between owners: a flood to a slow receiver does not queue another owner behind it', async () => {
    // The flood's receiver answers 500 after 150-600 ms, staggered, so slots free one at a time and most claims
    // are claims of one: fairness must hold across claims, not only within a claim of several.
    let nthRequest = 0;
    const slow = await startReceiver(() => ({ status: 500, afterMs: 150 + ((nthRequest++ * 137) % 450) }));
    const fast = await startReceiver(() => 204);
    const concurrency = 4;
    const t = await startTestApp({
      role: 'all',
      workerPollMs: 10,
      webhookAllowedHosts: [`127.0.0.1:${slow.port}`, `127.0.0.1:${fast.port}`],
      webhookConcurrency: concurrency,
      webhookTimeoutMs: 2_000,
      webhookPollMs: 20,
      webhookBackoffScale: 0.001,
      shutdownGraceMs: 100,
    });
    try {
      const flooder = await t.key('owner-flood');
      const patient = await t.key('owner-patient');
      await subscribe(t, flooder, slow.url, ['job.succeeded']);
      await subscribe(t, patient, fast.url, ['job.succeeded']);
      const job = (key: string, k: string) =>
        t
          .http()
          .post('/v1/jobs')
          .set(bearer(key))
          .set('Idempotency-Key', k)
          .send({ operation: 'summarize', input: { text: k } })
          .expect(201);
      await Promise.all(Array.from({ length: 40 }, (_, i) => job(flooder, `flood-${i}`)));
      // The flood's 40 deliveries are queued ahead, and the slots are busy with them, freeing one by one.
      await waitFor(
        async () =>
          (
            await t.dataSource.query(`SELECT count(*)::int AS n FROM webhook_deliveries WHERE owner_id = 'owner-flood'`)
          )[0].n,
        (n) => n === 40,
        20_000,
      );
      await waitFor(
        async () => slow.received.length,
        (n) => n >= 2 * concurrency,
        20_000,
      );
      const before = slow.received.length;
      await job(patient, 'patient');
      await waitFor(
        async () => fast.received.length,
        (n) => n === 1,
        20_000,
      );
      // Round-robin by owner, counting what each owner has in flight: the patient owner's delivery takes the next
      // free slot. First-come order would send the rest of the flood (30 and more) first.
      expect(slow.received.length - before).toBeLessThanOrEqual(2 * concurrency);
    } finally {
      await t.close();
      await slow.close();
      await fast.close();
    }
  }, 60_000);

  it('keeps every rotated-out secret signing until the expiry its rotation promised, through a second rotation', async () => {
    const receiver = await startReceiver(() => 204);
    const t = await startTestApp(apiEnv(receiver.url));
    try {
      const key = await t.key('owner-rotate');
      const endpoint = await subscribe(t, key, receiver.url);
      const rotate = async () => {
        const res = await t.http().post(`/v1/webhooks/${endpoint.id}/rotate-secret`).set(bearer(key));
        expect(res.status).toBe(200);
        return res.body as { secret: string; previousSecretExpiresAt: string };
      };
      const first = await rotate();
      const second = await rotate();
      // The first rotation promised the original secret until about a day from now; the second must keep that.
      expect(Date.parse(first.previousSecretExpiresAt)).toBeGreaterThan(Date.now() + 23 * 3_600_000);
      const deliver = async (idempotencyKey: string) => {
        await cancelledJob(t, key, idempotencyKey);
        const [claimed] = await t.app.get(WebhookDeliveriesRepository).claimDue(10, 60_000);
        await t.app.get(WebhookDispatcher).send(claimed);
        return receiver.received[receiver.received.length - 1];
      };
      const verifies = (secret: string, seen: { raw: string; headers: Record<string, string> }) => {
        try {
          new Webhook(secret).verify(seen.raw, seen.headers);
          return true;
        } catch {
          return false;
        }
      };
      const seen = await deliver('after-two-rotations');
      expect({
        original: verifies(endpoint.secret, seen),
        first: verifies(first.secret, seen),
        current: verifies(second.secret, seen),
      }).toEqual({
        original: true,
        first: true,
        current: true,
      });
      expect(seen.headers['webhook-signature'].split(' ')).toHaveLength(3);

      // Once the original secret's promised expiry has passed it signs no more; the others still do.
      await t.dataSource.query(
        `UPDATE webhook_endpoints SET previous_secrets = (
           SELECT jsonb_agg(CASE WHEN p->>'secret' = $2 THEN jsonb_set(p, '{expiresAt}', to_jsonb(now() - interval '1 second')) ELSE p END)
             FROM jsonb_array_elements(previous_secrets) p) WHERE id = $1`,
        [endpoint.id, endpoint.secret],
      );
      const later = await deliver('after-the-first-expiry');
      expect({
        original: verifies(endpoint.secret, later),
        first: verifies(first.secret, later),
        current: verifies(second.secret, later),
      }).toEqual({
        original: false,
        first: true,
        current: true,
      });
      // Five rotated-out secrets may sign at once (the first and four more); a sixth rotation keeps every promise
      // by being refused until the oldest expires.
      for (let i = 0; i < 4; i++) await rotate();
      const refused = await t.http().post(`/v1/webhooks/${endpoint.id}/rotate-secret`).set(bearer(key));
      expect(refused.status).toBe(409);
      expect(refused.body.code).toBe('webhook_rotation_limit');
    } finally {
      await t.close();
      await receiver.close();
    }
  }, 30_000);
});
