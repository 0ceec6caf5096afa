import { chmodSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import pg from 'pg';

import { type EmbeddedDatabase, freePort, startEmbeddedPostgres } from '../../src/database/embedded-postgres.js';
import { spawnService, waitUntilReady } from '../helpers/process.js';
import { createKey, describeLocal, RACE_CATALOG } from './target.js';

interface Outcome {
  at: number;
  key: string;
  status: number | 'network';
  id?: string;
  retryAfter?: string | null;
  code?: string;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

// Needs a PostgreSQL it may stop: in-process only (the worker SIGKILL case is test/process-faults.e2e-spec.ts).
describeLocal('race suite: PostgreSQL goes away under load', () => {
  it('answers 503 with Retry-After while it is down, serves again without a restart, and keeps every 201 exactly once', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'onejob-outage-'));
    chmodSync(dir, 0o777);
    const port = await freePort();
    let database: EmbeddedDatabase = await startEmbeddedPostgres({ dataDir: dir, database: 'onejob', port });
    const service = await spawnService({
      DATABASE_URL: database.url,
      CATALOG_FILE: RACE_CATALOG,
      ROLE: 'api',
      DB_POOL_SIZE: '4',
    });
    try {
      await waitUntilReady(service);
      const key = createKey(database.url, 'outage', 'jobs:write,jobs:read');

      const outcomes: Outcome[] = [];
      let running = true;
      const loops = Array.from({ length: 4 }, async (_, loop) => {
        for (let i = 0; running; i++) {
          const idempotencyKey = `outage-${loop}-${i}`;
          try {
            const res = await fetch(`${service.baseUrl}/v1/jobs`, {
              method: 'POST',
              headers: {
                authorization: `Bearer ${key}`,
                'idempotency-key': idempotencyKey,
                'content-type': 'application/json',
              },
              body: JSON.stringify({ operation: 'summarize', input: { text: idempotencyKey } }),
              signal: AbortSignal.timeout(10_000),
            });
            const body = (await res.json()) as { id?: string; code?: string };
            outcomes.push({
              at: Date.now(),
              key: idempotencyKey,
              status: res.status,
              id: body.id,
              code: body.code,
              retryAfter: res.headers.get('retry-after'),
            });
          } catch {
            outcomes.push({ at: Date.now(), key: idempotencyKey, status: 'network' });
          }
          await sleep(25);
        }
      });

      await sleep(1500);
      await database.stop();
      const downAt = Date.now();
      await sleep(3000);
      const restartAt = Date.now();
      database = await startEmbeddedPostgres({ dataDir: dir, database: 'onejob', port });
      const upAt = Date.now();
      await sleep(3000);
      running = false;
      await Promise.all(loops);

      expect(
        outcomes.filter(
          (o) => o.status === 'network' || (typeof o.status === 'number' && o.status >= 500 && o.status !== 503),
        ),
      ).toEqual([]);
      const during = outcomes.filter((o) => o.at > downAt + 500 && o.at < restartAt);
      expect(during.length).toBeGreaterThan(0);
      for (const o of during) {
        expect(o).toMatchObject({
          status: 503,
          code: 'service_unavailable',
          retryAfter: expect.stringMatching(/^\d+$/),
        });
      }
      const after = outcomes.filter((o) => o.at > upAt + 1500);
      expect(after.length).toBeGreaterThan(0);
      expect(after.every((o) => o.status === 201)).toBe(true);

      const client = new pg.Client({ connectionString: database.url });
      await client.connect();
      try {
        const rows: Array<{ idempotency_key: string; id: string }> = (
          await client.query(`SELECT idempotency_key, id FROM jobs WHERE owner_id = 'outage'`)
        ).rows;
        const stored = new Map(rows.map((r) => [r.idempotency_key, r.id]));
        expect(stored.size).toBe(rows.length); // one job per key
        const acknowledged = outcomes.filter((o) => o.status === 201);
        expect(acknowledged.length).toBeGreaterThan(10);
        for (const o of acknowledged) expect(stored.get(o.key)).toBe(o.id);
      } finally {
        await client.end();
      }
    } finally {
      service.kill('SIGTERM');
      await service.exited;
      await database.stop();
    }
  }, 60_000);
});
