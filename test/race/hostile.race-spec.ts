import fc from 'fast-check';

import { client, FULL, jobsWithKeyPrefix, type RaceTarget, raceTarget, RUN } from './target.js';

interface Hostile {
  method: 'GET' | 'POST';
  path: string;
  headers: Record<string, string>;
  body?: string | Uint8Array;
  /** The Idempotency-Key sent, when it is one this run may legitimately create a job with. */
  key?: string;
}

const PREFIX = `${RUN}-h-`;
const junk = fc.oneof(
  fc.string({ maxLength: 40 }),
  fc.string({ unit: 'binary', maxLength: 40 }),
  fc.constantFrom(
    '',
    ' ',
    '\u0000',
    '%00',
    '../../etc/passwd',
    "' OR 1=1 --",
    '__proto__',
    'constructor',
    '00000000-0000-4000-8000-000000000000',
    'x'.repeat(300),
  ),
);
const goodKey = fc.stringMatching(/^[a-z0-9]{1,16}$/).map((s) => `${PREFIX}${s}`);
const badKey = fc.constantFrom('', ' ', 'a b', 'k'.repeat(256), 'tab\there', 'clé');
const anyJson = fc.jsonValue({ maxDepth: 4 });

const bodyText = fc.oneof(
  // The right shape with wrong parts.
  fc
    .record(
      {
        operation: fc.oneof(fc.constant('summarize'), junk, anyJson),
        input: fc.oneof(fc.record({ text: fc.oneof(fc.string(), anyJson) }), anyJson),
        providers: fc.oneof(anyJson, fc.array(junk, { maxLength: 3 })),
        extra: anyJson,
      },
      { requiredKeys: [] },
    )
    .map((b) => JSON.stringify(b)),
  anyJson.map((v) => JSON.stringify(v)),
  fc.integer({ min: 10, max: 5000 }).map((n) => '['.repeat(n) + ']'.repeat(n)),
  fc
    .integer({ min: 10, max: 3000 })
    .map((n) => '{"operation":"summarize","input":' + '{"a":'.repeat(n) + '1' + '}'.repeat(n) + '}'),
  fc.constantFrom(
    '{"__proto__":{"admin":true},"operation":"summarize","input":{"text":"a"}}',
    '{"operation":"summarize","input":{"text":"a","__proto__":{"polluted":1}}}',
    '{"constructor":{"prototype":{"polluted":1}},"operation":"summarize","input":{"text":"a"}}',
    '{"operation":"summarize","input":{"text":1e999999}}',
    '{"operation":"summarize","input":{"text":"a"},"providers":[' + '"race-primary",'.repeat(50) + '"x"]}',
    '{"operation":"summarize","input":{"text":"' + 'x'.repeat(3000) + '"}}',
    '{"operation": "summarize", "input": {"text": "a"}',
    'null',
    '',
  ),
  fc
    .integer({ min: 1, max: 3 })
    .map((mb) => JSON.stringify({ operation: 'summarize', input: { text: 'y'.repeat(mb * 1024 * 1024) } })),
);
const invalidUtf8 = fc
  .uint8Array({ minLength: 1, maxLength: 64 })
  .map((bytes) => Uint8Array.from([0x7b, 0x22, 0xc3, 0x28, 0xff, ...bytes]));
const contentType = fc.oneof(
  fc.constant('application/json'),
  fc.constantFrom(
    'text/plain',
    'application/json; charset=utf-16',
    'application/x-www-form-urlencoded',
    'multipart/form-data; boundary=x',
    '*/*',
    'application/jsonx',
  ),
);
const idPart = fc.oneof(
  fc.uuid(),
  junk.map((s) => encodeURIComponent(s) || 'x'),
);

function hostileRequests(keys: { owner: string }): fc.Arbitrary<Hostile> {
  const auth = fc.oneof(
    { arbitrary: fc.constant(`Bearer ${keys.owner}`), weight: 6 },
    {
      arbitrary: fc.constantFrom(
        '',
        'Bearer',
        'Bearer ',
        'Basic dXNlcjpwYXNz',
        `Bearer ${keys.owner}x`,
        'bearer  ' + keys.owner,
      ),
      weight: 1,
    },
  );
  const createJob = fc
    .record({
      key: fc.oneof(goodKey, badKey, fc.constant(undefined)),
      ct: contentType,
      auth,
      body: fc.oneof({ arbitrary: bodyText, weight: 8 }, { arbitrary: invalidUtf8, weight: 1 }),
    })
    .map(({ key, ct, auth: a, body }): Hostile => ({
      method: 'POST',
      path: '/v1/jobs',
      headers: { 'content-type': ct, authorization: a, ...(key !== undefined ? { 'idempotency-key': key } : {}) },
      body,
      key: key?.startsWith(PREFIX) ? key : undefined,
    }));
  const read = fc
    .record({
      id: idPart,
      auth,
      query: fc.dictionary(fc.constantFrom('limit', 'cursor', 'status', 'x', '__proto__'), junk, { maxKeys: 3 }),
      list: fc.boolean(),
    })
    .map(({ id, auth: a, query, list }): Hostile => ({
      method: 'GET',
      path: list ? `/v1/jobs?${new URLSearchParams(query as Record<string, string>).toString()}` : `/v1/jobs/${id}`,
      headers: { authorization: a },
    }));
  const act = fc
    .record({
      id: idPart,
      auth,
      ct: contentType,
      body: bodyText,
      which: fc.constantFrom('attempts', 'cancel', 'resolve'),
    })
    .map(({ id, auth: a, ct, body, which }): Hostile => ({
      method: 'POST',
      path: which === 'resolve' ? `/v1/attempts/${id}/resolve` : `/v1/jobs/${id}/${which}`,
      headers: { authorization: a, 'content-type': ct },
      body,
    }));
  return fc.oneof({ arbitrary: createJob, weight: 5 }, { arbitrary: read, weight: 2 }, { arbitrary: act, weight: 2 });
}

describe('race suite: hostile input', () => {
  let target: RaceTarget;
  beforeAll(async () => {
    target = await raceTarget({ replicas: 1 });
  }, 60_000);
  afterAll(() => target.close());

  const count = FULL ? 10_000 : 1_000;

  it(`answers ${count} generated hostile requests without a 5xx, every refusal problem+json, nothing written by a refusal`, async () => {
    const requests = fc.sample(hostileRequests(target.keys), {
      numRuns: count,
      seed: Number(process.env.PROPERTY_SEED ?? 20261129),
    });
    const created = new Set<string>();
    const failures: string[] = [];
    let sent = 0;
    for (let i = 0; i < requests.length; i += 25) {
      await Promise.all(
        requests.slice(i, i + 25).map(async (r) => {
          let res: Response;
          try {
            res = await fetch(`${target.urls[0]}${r.path}`, { method: r.method, headers: r.headers, body: r.body });
          } catch (error) {
            const cause = (error as Error & { cause?: Error & { code?: string } }).cause;
            if (
              error instanceof TypeError &&
              /header|ByteString|Headers/i.test(`${(error as Error).message} ${cause?.message}`)
            ) {
              return;
            } // the client refused to send it
            // Over the body limit the server answers 413 and closes before the client has written everything.
            if ((r.body?.length ?? 0) > 1_048_576 && (cause?.code === 'EPIPE' || cause?.code === 'ECONNRESET')) return;
            throw error;
          }
          sent++;
          const text = await res.text();
          const describe = `${r.method} ${r.path.slice(0, 80)} -> ${res.status} ${text.slice(0, 120)}`;
          if (res.status >= 500) failures.push(describe);
          else if (res.status >= 400) {
            let problem: { code?: unknown; status?: unknown } = {};
            try {
              problem = JSON.parse(text);
            } catch {
              // checked below
            }
            if (
              !/^application\/problem\+json/.test(res.headers.get('content-type') ?? '') ||
              typeof problem.code !== 'string' ||
              problem.status !== res.status
            ) {
              failures.push(`not problem+json: ${describe}`);
            }
          } else if (res.status === 201 && r.key) created.add(r.key);
          else if (res.status === 201) failures.push(`created a job without a run key: ${describe}`);
        }),
      );
    }
    expect(failures.slice(0, 10)).toEqual([]);
    expect(sent).toBeGreaterThan(count * 0.9);

    // Only requests that were answered 201 wrote jobs.
    const stored = await jobsWithKeyPrefix(client(target, target.keys.owner), PREFIX);
    expect(stored.map((j) => j.idempotencyKey).sort()).toEqual([...created].sort());
  }, 600_000);
});
