import { base64url, type CryptoKey, exportSPKI, importJWK, SignJWT } from 'jose';

import { ApiKeysService } from '../src/auth/api-keys.service.js';
import { postJob } from './factories/index.js';
import { bearer, startTestApp, type TestApp } from './helpers/app.js';
import { writeCatalog } from './helpers/catalog.js';
import { TestIdentityProvider, writeIssuers } from './helpers/identity-provider.js';
import { readRaw } from './helpers/sse.js';
import { sleep, waitFor } from './helpers/wait.js';

const GROUPS = {
  'onejob-writers': ['jobs:write', 'jobs:read'],
  'onejob-operators': ['ops:read', 'attempts:resolve'],
  'onejob-admins': ['owners:write'],
};

/** An unsigned token (`alg: none`): header and claims, no signature. */
const unsigned = (claims: object) =>
  `${base64url.encode(JSON.stringify({ alg: 'none', typ: 'JWT' }))}.${base64url.encode(JSON.stringify(claims))}.`;

describe('JWTs of configured issuers beside API keys, and stream tokens (I15)', () => {
  let t: TestApp;
  /** The company IdP: a jwksUri given, groups mapped to scopes, a short cooldown. */
  let idp: TestIdentityProvider;
  /** A cluster's service-account issuer: keys found by discovery, owner by a template over a dotted claim. */
  let cluster: TestIdentityProvider;
  /** An issuer for the unknown-kid and hanging-JWKS cases (a cooldown of 2 s, a 500 ms timeout). */
  let flaky: TestIdentityProvider;
  /** Not configured: its tokens are nobody's. */
  let stranger: TestIdentityProvider;
  let ownerKey: string;
  const later = Math.floor(Date.now() / 1000) + 3600;

  const writer = (claims: Record<string, unknown> = {}, kid?: string) =>
    idp.sign({ sub: 'alice', azp: 'team-jwt', groups: ['onejob-writers'], ...claims }, { audience: 'onejob', kid });

  const refused = async (token: string, code = 'unauthorized') => {
    const res = await t.http().get('/v1/jobs').set(bearer(token));
    expect({ status: res.status, code: res.body.code }).toEqual({ status: 401, code });
    expect(res.headers['www-authenticate']).toBe('Bearer');
    return res;
  };

  beforeAll(async () => {
    [idp, cluster, flaky, stranger] = await Promise.all([0, 1, 2, 3].map(() => new TestIdentityProvider().start()));
    await idp.addKey('RS256');
    await idp.addKey('ES256');
    await idp.addKey('EdDSA');
    await cluster.addKey('RS256');
    await flaky.addKey('ES256');
    await stranger.addKey('RS256');
    const authIssuersFile = writeIssuers([
      {
        issuer: idp.issuer,
        jwksUri: `${idp.url}/jwks`,
        audience: 'onejob',
        jwksCooldownSec: 1,
        owner: { claim: 'azp' },
        scopes: { claim: 'groups', map: GROUPS },
      },
      {
        issuer: cluster.issuer,
        audience: ['onejob', 'other-audience'],
        algorithms: ['RS256'],
        owner: { template: 'k8s-{{kubernetes.io.namespace}}-{{kubernetes.io.serviceaccount.name}}' },
        scopes: { static: ['jobs:write', 'jobs:read'] },
      },
      {
        issuer: flaky.issuer,
        jwksUri: `${flaky.url}/jwks`,
        audience: 'onejob',
        jwksCooldownSec: 2,
        jwksTimeoutMs: 500,
        owner: { claim: 'sub' },
        scopes: { claim: 'scope' },
      },
    ]);
    const catalogFile = writeCatalog((c) => {
      const simulate = { latencyMs: 4000, outcome: 'success' };
      c.providers.push({ name: 'sim-slow', kind: 'simulated', model: 'sim-s', timeoutMs: 8000, simulate });
    });
    t = await startTestApp({
      role: 'all',
      catalogFile,
      authIssuersFile,
      workerPollMs: 10,
      reconcileIntervalMs: 100,
      streamTokenTtlSeconds: 3,
      streamHeartbeatMs: 200,
    });
    ownerKey = await t.key('team-key', ['jobs:write', 'jobs:read']);
  }, 60_000);

  afterAll(async () => {
    await t?.close();
    await Promise.all([idp, cluster, flaky, stranger].map((p) => p?.stop()));
  });

  describe('tokens map to an owner and scopes, and meet the walls every principal meets', () => {
    it.each(['RS256', 'ES256', 'EdDSA'])('a %s token creates and reads its owner’s jobs only', async (alg) => {
      const kid = [...idp.keys.values()].find((k) => k.alg === alg)!.kid;
      const token = await writer({}, kid);
      const job = await postJob(t, token);
      const row = await t.dataSource.query('SELECT owner_id FROM jobs WHERE id = $1', [job.id]);
      expect(row[0].owner_id).toBe('team-jwt');
      await t.http().get(`/v1/jobs/${job.id}`).set(bearer(token)).expect(200);
      // Another owner's job is 404 to the token (I7), and the token's job is 404 to another owner's key.
      const keyJob = await postJob(t, ownerKey);
      await t.http().get(`/v1/jobs/${keyJob.id}`).set(bearer(token)).expect(404);
      await t.http().get(`/v1/jobs/${job.id}`).set(bearer(ownerKey)).expect(404);
      // A key of the same owner name is the same owner: the owner is a name, whatever proved it.
      const sameOwner = await t.key('team-jwt', ['jobs:read']);
      await t.http().get(`/v1/jobs/${job.id}`).set(bearer(sameOwner)).expect(200);
    });

    it('answers 403 for a scope the token’s groups do not map to, and a token mapping to none can do nothing', async () => {
      const res = await t
        .http()
        .get('/v1/ops/jobs')
        .set(bearer(await writer()));
      expect({ status: res.status, code: res.body.code }).toEqual({ status: 403, code: 'forbidden' });
      const nobody = await writer({ groups: ['unmapped-group'] });
      const none = await t.http().get('/v1/jobs').set(bearer(nobody));
      expect({ status: none.status, code: none.body.code }).toEqual({ status: 403, code: 'forbidden' });
      const operator = await writer({ groups: ['onejob-operators', 'onejob-writers'] });
      await t.http().get('/v1/ops/jobs').set(bearer(operator)).expect(200);
    });

    it('finds a cluster issuer’s keys by discovery and maps a service account through the dotted kubernetes.io claim', async () => {
      const token = await cluster.sign(
        {
          sub: 'system:serviceaccount:payments:batcher',
          'kubernetes.io': { namespace: 'payments', serviceaccount: { name: 'batcher', uid: 'u-1' } },
        },
        { audience: 'onejob' },
      );
      const job = await postJob(t, token);
      const row = await t.dataSource.query('SELECT owner_id FROM jobs WHERE id = $1', [job.id]);
      expect(row[0].owner_id).toBe('k8s-payments-batcher');
      expect(cluster.discoveryRequests).toBe(1);
      // A token missing a claim the template names maps to no owner: refused, never an owner "k8s--".
      const partial = await cluster.sign(
        { sub: 'x', 'kubernetes.io': { namespace: 'payments' } },
        { audience: 'onejob' },
      );
      const res = await refused(partial);
      expect(res.body.detail).toContain('kubernetes.io.serviceaccount.name');
    });
  });

  describe('refusals', () => {
    it('refuses an expired token with token_expired, distinct from unauthorized', async () => {
      await refused(await writer({ exp: Math.floor(Date.now() / 1000) - 60 }), 'token_expired');
    });

    it('refuses a token not valid yet, of another issuer, for another audience, or without exp', async () => {
      await refused(await writer({ nbf: later }));
      await refused(
        await stranger.sign({ sub: 'alice', azp: 'team-jwt', groups: ['onejob-writers'] }, { audience: 'onejob' }),
      );
      // A stranger's key signing a token that claims the trusted issuer: its kid is unknown there.
      await refused(
        await stranger.sign({ iss: idp.issuer, azp: 'team-jwt', groups: ['onejob-writers'] }, { audience: 'onejob' }),
      );
      await refused(await idp.sign({ azp: 'team-jwt', groups: ['onejob-writers'] }, { audience: 'someone-else' }));
      const kid = [...idp.keys.keys()][0];
      const noExp = await new SignJWT({ azp: 'team-jwt', groups: ['onejob-writers'] })
        .setProtectedHeader({ alg: 'RS256', kid })
        .setIssuer(idp.issuer)
        .setAudience('onejob')
        .sign(idp.keys.get(kid)!.privateKey);
      await refused(noExp);
    });

    it('refuses alg none, and an HS256 token whose secret is the issuer’s public key', async () => {
      await refused(
        unsigned({ iss: idp.issuer, aud: 'onejob', azp: 'team-jwt', groups: ['onejob-writers'], exp: later }),
      );
      const kid = [...idp.keys.values()].find((k) => k.alg === 'RS256')!.kid;
      const publicPem = await exportSPKI((await importJWK(idp.publicJwk(kid), 'RS256')) as CryptoKey);
      const forged = await new SignJWT({ azp: 'team-jwt', groups: ['onejob-writers'] })
        .setProtectedHeader({ alg: 'HS256', kid })
        .setIssuer(idp.issuer)
        .setAudience('onejob')
        .setExpirationTime('1h')
        .sign(new TextEncoder().encode(publicPem));
      await refused(forged);
      // Nothing a refused token asked for was written.
      const jobs = await t.dataSource.query("SELECT count(*)::int AS n FROM jobs WHERE owner_id = 'team-jwt-none'");
      expect(jobs[0].n).toBe(0);
    });

    it('refetches the keys once for an unknown kid, then 401, with no refetch storm under 1,000 requests', async () => {
      await postJob(t, await flaky.sign({ sub: 'flaky-owner', scope: 'jobs:write jobs:read' }, { audience: 'onejob' }));
      const unknownKid = await flaky.addKey('ES256', false);
      const token = await flaky.sign(
        { sub: 'flaky-owner', scope: 'jobs:read' },
        { audience: 'onejob', kid: unknownKid },
      );
      await sleep(2100); // past the cooldown since the first fetch
      const before = flaky.jwksRequests;
      const res = await refused(token);
      expect(res.body.detail).toContain('kid');
      expect(flaky.jwksRequests - before).toBe(1);
      const started = Date.now();
      const answers = await Promise.all(
        Array.from({ length: 1000 }, () => t.http().get('/v1/jobs').set(bearer(token))),
      );
      const elapsedMs = Date.now() - started;
      expect(answers.every((a) => a.status === 401 && a.body.code === 'unauthorized')).toBe(true);
      // At most one refetch per cooldown (2 s) while they ran: one in all within the first cooldown.
      expect(flaky.jwksRequests - before).toBeLessThanOrEqual(1 + Math.ceil(elapsedMs / 2000));
      // The issuer rotates: once it serves the key, the next request after the cooldown passes on one refetch.
      flaky.served.add(unknownKid);
      await sleep(2100);
      const rotated = flaky.jwksRequests;
      await t.http().get('/v1/jobs').set(bearer(token)).expect(200);
      expect(flaky.jwksRequests - rotated).toBe(1);
    }, 60_000);

    it('a JWKS endpoint that hangs: cached keys still pass, a new kid is refused within the timeout', async () => {
      const known = await flaky.sign({ sub: 'flaky-owner', scope: 'jobs:read' }, { audience: 'onejob' });
      await t.http().get('/v1/jobs').set(bearer(known)).expect(200);
      flaky.hang = true;
      try {
        const fresh = await flaky.addKey('ES256');
        const newKid = await flaky.sign({ sub: 'flaky-owner', scope: 'jobs:read' }, { audience: 'onejob', kid: fresh });
        await sleep(2100); // the cooldown lets a refetch through: it will hang
        const before = flaky.jwksRequests;
        const started = Date.now();
        const [refusedNew, ...passed] = await Promise.all([
          t.http().get('/v1/jobs').set(bearer(newKid)),
          ...Array.from({ length: 20 }, async (_, i) =>
            t
              .http()
              .get('/v1/jobs')
              .set(bearer(await flaky.sign({ sub: 'flaky-owner', scope: 'jobs:read', n: i }, { audience: 'onejob' }))),
          ),
        ]);
        const elapsedMs = Date.now() - started;
        expect({ status: refusedNew.status, code: refusedNew.body.code }).toEqual({
          status: 401,
          code: 'unauthorized',
        });
        expect(refusedNew.body.detail).toContain('in time');
        expect(elapsedMs).toBeLessThan(500 + 2000);
        expect(passed.map((p) => p.status)).toEqual(passed.map(() => 200));
        expect(flaky.jwksRequests - before).toBe(1);
      } finally {
        flaky.hang = false;
      }
    }, 30_000);
  });

  describe('API keys: a revoked key and an expired key have codes of their own', () => {
    it('answers key_revoked for a revoked key and token_expired for an expired one', async () => {
      const keys = t.app.get(ApiKeysService);
      const made = await keys.create('team-revoked', ['jobs:read']);
      await t.http().get('/v1/jobs').set(bearer(made.key)).expect(200);
      await keys.revoke(made.id);
      await waitFor(
        async () => (await t.http().get('/v1/jobs').set(bearer(made.key))).body.code,
        (code) => code === 'key_revoked',
      );
      const expired = await keys.create('team-expired', ['jobs:read'], new Date(Date.now() - 1000));
      await refused(expired.key, 'token_expired');
      await refused('oj_never-made-0123456789012345678901234567890');
    });
  });

  describe('audit records name a token’s subject and issuer', () => {
    it('records the operator’s subject and issuer on a resolve, and the admin’s on a share change', async () => {
      const job = await postJob(t, ownerKey, { providers: ['sim-hang'] });
      const attemptId = await waitFor(
        async () => (await t.http().get(`/v1/jobs/${job.id}`).set(bearer(ownerKey))).body,
        (j) => j.attempts[0]?.status === 'unknown',
      ).then((j) => j.attempts[0].id as string);
      const operator = await idp.sign(
        { sub: 'carol', azp: 'ops-team', groups: ['onejob-operators'] },
        { audience: 'onejob' },
      );
      await t
        .http()
        .post(`/v1/attempts/${attemptId}/resolve`)
        .set(bearer(operator))
        .send({ status: 'failed', reason: 'checked at the provider' })
        .expect(200);
      const events = await t.http().get(`/v1/jobs/${job.id}/events`).set(bearer(operator)).expect(200);
      const resolved = events.body.items.find((e: { reason: string }) => e.reason === 'resolved_by_operator');
      expect(resolved.actor).toEqual({ keyId: null, subject: 'carol', issuer: idp.issuer, owner: 'ops-team' });
      const admin = await idp.sign({ sub: 'dave', azp: 'admins', groups: ['onejob-admins'] }, { audience: 'onejob' });
      await t.http().put('/v1/ops/owners/team-x').set(bearer(admin)).send({ weight: 3 }).expect(200);
      const [change] = await t.dataSource.query(
        "SELECT actor_key_id, actor_owner, actor_subject, actor_issuer FROM owner_share_changes WHERE owner_id = 'team-x'",
      );
      expect(change).toEqual({
        actor_key_id: null,
        actor_owner: 'admins',
        actor_subject: 'dave',
        actor_issuer: idp.issuer,
      });
    });
  });

  describe('stream tokens open one stream, and nothing else', () => {
    const mint = async (jobId: string, key = ownerKey, expected = 201) =>
      (await t.http().post(`/v1/jobs/${jobId}/stream-tokens`).set(bearer(key)).expect(expected)).body as {
        token: string;
        expiresAt: string;
        url: string;
      };

    it('opens its own job’s stream as ?access_token=, and is refused on another job’s, on other routes, and as a bearer', async () => {
      const job = await postJob(t, ownerKey, { providers: ['sim-slow'] });
      const other = await postJob(t, ownerKey, { providers: ['sim-slow'] });
      const minted = await mint(job.id);
      expect(minted.url).toBe(`/v1/jobs/${job.id}/events?access_token=${minted.token}`);
      const ttl = Date.parse(minted.expiresAt) - Date.now();
      expect(ttl).toBeGreaterThan(0);
      expect(ttl).toBeLessThanOrEqual(3000);
      const opened = await readRaw(`${t.baseUrl}${minted.url}`, {}, (text) => text.includes('event: job.pending'));
      expect(opened.status).toBe(200);
      expect(opened.text).toContain('event: job.pending');
      const elsewhere = await readRaw(
        `${t.baseUrl}/v1/jobs/${other.id}/events?access_token=${minted.token}`,
        {},
        () => true,
      );
      expect(elsewhere.status).toBe(401);
      // The JSON pages of its own job are another thing than its stream.
      const pages = await t.http().get(`${minted.url}`).set('Accept', 'application/json');
      expect({ status: pages.status, code: pages.body.code }).toEqual({ status: 401, code: 'unauthorized' });
      // No other route takes access_token (400: not a parameter of GET /v1/jobs), nor the token as a bearer.
      await t.http().get(`/v1/jobs?access_token=${minted.token}`).expect(400);
      await refused(minted.token);
      // With a second credential beside it: refused whole.
      const both = await readRaw(`${t.baseUrl}${minted.url}`, bearer(ownerKey), () => true);
      expect(both.status).toBe(400);
      // Another owner cannot mint one for this job (I7).
      const stranger = await t.key('team-other', ['jobs:read']);
      await mint(job.id, stranger, 404);
    });

    it('is refused after its expiry with token_expired, and ends the stream it opened at that moment', async () => {
      const job = await postJob(t, ownerKey, { providers: ['sim-hang'] });
      const minted = await mint(job.id);
      const started = Date.now();
      const whole = await readRaw(`${t.baseUrl}${minted.url}`, {}, () => false, 10_000);
      const lasted = Date.now() - started;
      expect(whole.status).toBe(200);
      // The job is still waiting (unknown, held): only the token's expiry (3 s) ended the stream.
      expect(lasted).toBeGreaterThan(2000);
      expect(lasted).toBeLessThan(6000);
      const again = await readRaw(`${t.baseUrl}${minted.url}`, {}, () => true);
      expect(again.status).toBe(401);
      const res = await t.http().get(minted.url).set('Accept', 'text/event-stream').buffer(true);
      expect(res.body.code ?? JSON.parse(res.text).code).toBe('token_expired');
    }, 20_000);

    it('ends a stream opened with a key when the key is revoked, and refuses the key’s stream tokens', async () => {
      const keys = t.app.get(ApiKeysService);
      const made = await keys.create('team-revoked-stream', ['jobs:write', 'jobs:read']);
      const job = await postJob(t, made.key, { providers: ['sim-hang'] });
      const minted = await mint(job.id, made.key);
      const started = Date.now();
      const stream = readRaw(`${t.baseUrl}/v1/jobs/${job.id}/events`, bearer(made.key), () => false, 15_000);
      await sleep(500);
      await keys.revoke(made.id);
      const ended = await stream;
      expect(ended.status).toBe(200);
      expect(Date.now() - started).toBeLessThan(5000);
      const refusedToken = await t.http().get(minted.url).set('Accept', 'text/event-stream').buffer(true);
      expect(refusedToken.status).toBe(401);
      expect(JSON.parse(refusedToken.text).code).toBe('key_revoked');
    }, 20_000);

    it('ends a stream opened with a JWT at the token’s exp', async () => {
      const exp = Math.floor(Date.now() / 1000) + 3;
      const token = await writer({ exp });
      const job = await postJob(t, token, { providers: ['sim-hang'] });
      const whole = await readRaw(`${t.baseUrl}/v1/jobs/${job.id}/events`, bearer(token), () => false, 15_000);
      expect(whole.status).toBe(200);
      // exp plus the issuer's clock tolerance (5 s by default), and no later than a second after.
      expect(Date.now()).toBeGreaterThanOrEqual((exp + 5) * 1000 - 50);
      expect(Date.now()).toBeLessThan((exp + 5) * 1000 + 1500);
    }, 20_000);

    it('makes a token for a batch’s stream, refused on the job streams', async () => {
      const created = await t
        .http()
        .post('/v1/batches')
        .set(bearer(ownerKey))
        .set('Idempotency-Key', `batch-${Date.now()}`)
        .send({ items: [{ key: 'a', operation: 'summarize', input: { text: 'x' }, providers: ['sim-slow'] }] })
        .expect(201);
      const batchId = created.body.id as string;
      const res = await t.http().post(`/v1/batches/${batchId}/stream-tokens`).set(bearer(ownerKey)).expect(201);
      expect(res.body.url).toBe(`/v1/batches/${batchId}/events?access_token=${res.body.token}`);
      const opened = await readRaw(`${t.baseUrl}${res.body.url}`, {}, (text) => text.includes('batch.progress'));
      expect(opened.status).toBe(200);
      const jobId = created.body.items[0].jobId as string;
      const onJob = await readRaw(
        `${t.baseUrl}/v1/jobs/${jobId}/events?access_token=${res.body.token}`,
        {},
        () => true,
      );
      expect(onJob.status).toBe(401);
    });
  });
});
