import { connect } from 'node:net';

import { bearer, startTestApp, type TestApp } from './helpers/app.js';
import { writeCatalog } from './helpers/catalog.js';

/** Sends raw bytes and returns the raw HTTP answer: for refusals made by the HTTP parser, before any route. */
function rawRequest(port: number, bytes: string | Buffer): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    let answer = '';
    // A server that never answers is cut off; the timer goes with the socket, so none outlives the suite.
    const cutOff = setTimeout(() => socket.destroy(), 2000);
    socket.on('data', (chunk) => (answer += chunk.toString('latin1')));
    socket.on('end', () => resolve(answer));
    socket.on('close', () => {
      clearTimeout(cutOff);
      resolve(answer);
    });
    socket.on('error', reject);
    socket.write(bytes);
  });
}

const problemOf = (answer: string) => ({
  status: Number(/^HTTP\/1\.1 (\d{3})/.exec(answer)?.[1]),
  contentType: /^content-type: *(.*)$/im.exec(answer)?.[1] ?? '',
  body: JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4) || 'null'),
});

describe('hostile text, wide bodies and parser-level refusals', () => {
  let t: TestApp;
  let key: string;
  let okKey: string;
  let port: number;

  beforeAll(async () => {
    const catalogFile = writeCatalog((catalog) => {
      catalog.operations.push({
        name: 'scored',
        temperature: 0,
        maxTokens: 30,
        prompt: { user: 'Score {{text}}' },
        inputSchema: {
          type: 'object',
          required: ['text', 'score'],
          properties: { text: { type: 'string' }, score: { type: 'number' } },
        },
        outputSchema: { type: 'object', required: ['summary'], properties: { summary: { type: 'string' } } },
        providers: ['sim-primary'],
        goldenCases: [{ input: { text: 'x', score: 1 } }],
      });
    });
    t = await startTestApp({ catalogFile });
    key = await t.key('owner-hostile');
    okKey = await t.key('owner-accepted');
    port = Number(new URL(t.baseUrl).port);
  });
  afterAll(() => t.close());

  const post = (raw: string | Buffer, headers: Record<string, string> = {}, apiKey = key) =>
    t
      .http()
      .post('/v1/jobs')
      .set(bearer(apiKey))
      .set('Idempotency-Key', `k-${Math.random()}`)
      .set('Content-Type', 'application/json')
      .set(headers)
      .send(raw);
  // Jobs of the refused requests' owner: the accepted cases below write with another owner.
  const jobCount = async () =>
    (await t.dataSource.query("SELECT count(*)::int AS n FROM jobs WHERE owner_id = 'owner-hostile'"))[0].n as number;

  describe('text PostgreSQL cannot store (issue 11 item 5)', () => {
    it.each([
      ['a NUL character', '{"operation":"summarize","input":{"text":"a\\u0000b"}}', 'input.text'],
      ['a lone high surrogate', '{"operation":"summarize","input":{"text":"a\\ud800b"}}', 'input.text'],
      [
        'a lone low surrogate in an array',
        '{"operation":"titled","input":{"text":"x","tags":["ok","\\udc00"]}}',
        'input.tags[1]',
      ],
      ['a NUL in a key', '{"operation":"titled","input":{"text":"x","a\\u0000":1}}', 'input'],
      ['a NUL in the operation name', '{"operation":"sum\\u0000","input":{"text":"x"}}', 'operation'],
    ])('refuses %s with 422 validation_failed naming the field', async (_name, raw, field) => {
      const res = await post(raw);
      expect({ status: res.status, code: res.body.code }).toEqual({ status: 422, code: 'validation_failed' });
      expect(res.headers['content-type']).toMatch(/^application\/problem\+json/);
      expect(res.body.errors.map((e: { field: string }) => e.field)).toContain(field);
      expect(await jobCount()).toBe(0);
    });

    it('refuses 1e400 against a numeric input schema with 422 (Infinity never reaches the fingerprint)', async () => {
      const res = await post('{"operation":"scored","input":{"text":"x","score":1e400}}');
      expect({ status: res.status, code: res.body.code }).toEqual({ status: 422, code: 'validation_failed' });
      expect(res.body.errors.map((e: { field: string }) => e.field)).toContain('input.score');
      expect(await jobCount()).toBe(0);
    });

    it('refuses -1e400 hidden in a free-form member with 422 as well', async () => {
      const res = await post('{"operation":"titled","input":{"text":"x","extra":{"n":-1e400}}}');
      expect({ status: res.status, code: res.body.code }).toEqual({ status: 422, code: 'validation_failed' });
      expect(res.body.errors.map((e: { field: string }) => e.field)).toContain('input.extra.n');
    });

    it('still stores ordinary non-ASCII text, astral characters included', async () => {
      const res = await post(JSON.stringify({ operation: 'summarize', input: { text: 'naïve 😀 日本' } }), {}, okKey);
      expect(res.status).toBe(201);
      expect(res.body.input.text).toBe('naïve 😀 日本');
    });
  });

  describe('wide bodies (issue 11 item 6)', () => {
    const wide = (keys: number) => {
      const members = Array.from({ length: keys }, (_, i) => `"k${i}":0`).join(',');
      return `{"operation":"summarize","input":{"text":"x"},${members}}`;
    };

    it('refuses ~1 MB with 90k unknown keys, four at once, each fast and small, while /health/live stays fast', async () => {
      const body = wide(90_000);
      expect(body.length).toBeGreaterThan(900_000);
      const probes: number[] = [];
      let probing = true;
      const probe = (async () => {
        while (probing) {
          const started = Date.now();
          await t.http().get('/health/live').expect(200);
          probes.push(Date.now() - started);
          await new Promise((r) => setTimeout(r, 20));
        }
      })();
      const results = await Promise.all(
        Array.from({ length: 4 }, async () => {
          const started = Date.now();
          const res = await post(body);
          return { ms: Date.now() - started, res };
        }),
      );
      probing = false;
      await probe;
      for (const { ms, res } of results) {
        expect({ status: res.status, code: res.body.code }).toEqual({ status: 400, code: 'validation_failed' });
        expect(res.text.length).toBeLessThan(10_000);
        expect(ms).toBeLessThan(1000);
      }
      expect(Math.max(...probes)).toBeLessThan(500);
      expect(await jobCount()).toBe(0);
    });

    it('reports at most 20 field errors and counts the rest', async () => {
      const res = await post(wide(500));
      expect(res.status).toBe(400);
      expect(res.body.errors).toHaveLength(20);
      expect(res.body.errorsOmitted).toBe(480);
      expect(res.text.length).toBeLessThan(10_000);
    });

    it('caps input schema errors the same way', async () => {
      const input = Object.fromEntries(Array.from({ length: 300 }, (_, i) => [`extra${i}`, 1]));
      const res = await post(JSON.stringify({ operation: 'summarize', input: { text: 'x', ...input } }));
      expect(res.status).toBe(422);
      expect(res.body.errors).toHaveLength(20);
      expect(res.body.errorsOmitted).toBe(280);
    });
  });

  describe('smaller ones (issue 11 item 11)', () => {
    it('accepts the Bearer scheme in any case', async () => {
      for (const scheme of ['bearer', 'BEARER', 'Bearer']) {
        const res = await t.http().get('/v1/jobs').set('Authorization', `${scheme} ${key}`);
        expect(res.status).toBe(200);
      }
    });

    it.each(['constructor', 'toString', '__proto__', 'hasOwnProperty', 'valueOf'])(
      'refuses a query parameter named %s like any unknown one',
      async (name) => {
        const res = await t.http().get(`/v1/jobs?${name}=1`).set(bearer(key));
        expect({ status: res.status, code: res.body.code }).toEqual({ status: 400, code: 'validation_failed' });
        expect(res.body.errors.map((e: { field: string }) => e.field)).toContain(name);
      },
    );

    it.each(['constructor', 'toString', 'valueOf'])(
      'refuses a body member named %s like any unknown one',
      async (name) => {
        const res = await post(`{"operation":"summarize","input":{"text":"x"},"${name}":1}`);
        expect({ status: res.status, code: res.body.code }).toEqual({ status: 400, code: 'validation_failed' });
        expect(await jobCount()).toBe(0);
      },
    );

    it('refuses a body that is not valid UTF-8 with 400 instead of storing U+FFFD', async () => {
      const bytes = Buffer.concat([
        Buffer.from('{"operation":"summarize","input":{"text":"a'),
        Buffer.from([0xc3, 0x28]),
        Buffer.from('"}}'),
      ]);
      const res = await post(bytes);
      expect({ status: res.status, code: res.body.code }).toEqual({ status: 400, code: 'validation_failed' });
      expect(res.headers['content-type']).toMatch(/^application\/problem\+json/);
      expect(await jobCount()).toBe(0);
    });

    it('refuses a charset other than UTF-8 with 400', async () => {
      const res = await post(Buffer.from('{"operation":"summarize","input":{"text":"caf\xe9"}}', 'latin1'), {
        'Content-Type': 'application/json; charset=iso-8859-1',
      });
      expect({ status: res.status, code: res.body.code }).toEqual({ status: 400, code: 'validation_failed' });
      expect(await jobCount()).toBe(0);
    });

    it('accepts an explicit charset=utf-8', async () => {
      const res = await post(
        JSON.stringify({ operation: 'summarize', input: { text: 'café' } }),
        { 'Content-Type': 'application/json; charset=UTF-8' },
        okKey,
      );
      expect(res.status).toBe(201);
      expect(res.body.input.text).toBe('café');
    });

    it('answers a NUL in a header with problem+json', async () => {
      const answer = await rawRequest(port, 'GET /v1/jobs HTTP/1.1\r\nHost: x\r\nX-Bad: a\0b\r\n\r\n');
      const problem = problemOf(answer);
      expect(problem.status).toBe(400);
      expect(problem.contentType).toMatch(/^application\/problem\+json/);
      expect(problem.body).toMatchObject({ status: 400, code: 'validation_failed' });
    });

    it('answers bad chunked encoding with problem+json', async () => {
      const answer = await rawRequest(
        port,
        `POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nAuthorization: Bearer ${key}\r\n\r\nzz\r\n{}\r\n0\r\n\r\n`,
      );
      const problem = problemOf(answer);
      expect(problem.status).toBe(400);
      expect(problem.contentType).toMatch(/^application\/problem\+json/);
      expect(problem.body).toMatchObject({ status: 400, code: 'validation_failed' });
    });
  });
});
