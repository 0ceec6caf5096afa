import { spawn } from 'node:child_process';
import { once } from 'node:events';

import pg from 'pg';

import { createTestDatabase, type TestDatabase } from './helpers/database.js';
import { spawnService, waitUntilReady } from './helpers/process.js';

/** `onejob apikey ...` as an operator runs it: the built CLI through bin/onejob.js, which never builds. */
async function onejob(
  args: string[],
  env: Record<string, string>,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, ['bin/onejob.js', ...args], {
    env: { PATH: process.env.PATH ?? '', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
  const [code] = await once(child, 'exit');
  clearTimeout(timer);
  return { code: code as number | null, stdout, stderr };
}

describe('the first API key of a container (onejob apikey bootstrap)', () => {
  let db: TestDatabase;
  const keys = async () => {
    const client = new pg.Client({ connectionString: db.url });
    await client.connect();
    try {
      return (await client.query('SELECT owner_id, scopes FROM api_keys')).rows as Array<{
        owner_id: string;
        scopes: string[];
      }>;
    } finally {
      await client.end();
    }
  };

  beforeEach(async () => {
    db = await createTestDatabase();
  });
  afterEach(() => db.drop());

  it('makes one key between two bootstraps started together, prints it once, and changes nothing on a later run', async () => {
    const [a, b] = await Promise.all([
      onejob(['apikey', 'bootstrap'], { DATABASE_URL: db.url }),
      onejob(['apikey', 'bootstrap'], { DATABASE_URL: db.url }),
    ]);
    expect([a.code, b.code]).toEqual([0, 0]);
    const printed = [a, b].map((run) => run.stdout.trim()).filter(Boolean);
    expect(printed).toHaveLength(1);
    expect(printed[0]).toMatch(/^oj_[A-Za-z0-9_-]{43}$/);
    expect(await keys()).toHaveLength(1);
    expect((await keys())[0].owner_id).toBe('admin');

    const later = await onejob(['apikey', 'bootstrap'], { DATABASE_URL: db.url });
    expect(later).toMatchObject({ code: 0, stdout: '' });
    expect(later.stderr).toContain('API keys exist already');
    expect(await keys()).toHaveLength(1);

    // The printed key works against a service on that database.
    const service = await spawnService({ DATABASE_URL: db.url, ROLE: 'api' });
    try {
      await waitUntilReady(service, 60_000);
      const res = await fetch(`${service.baseUrl}/v1/ops/jobs`, { headers: { Authorization: `Bearer ${printed[0]}` } });
      expect(res.status).toBe(200);
    } finally {
      service.kill('SIGTERM');
      await service.exited;
    }
  }, 120_000);

  it("stores the operator's ONEJOB_BOOTSTRAP_KEY without printing it, and refuses a malformed one without echoing it", async () => {
    const secret = `oj_${'k'.repeat(40)}`;
    const run = await onejob(['apikey', 'bootstrap', '--owner', 'platform', '--scopes', 'ops:read,attempts:resolve'], {
      DATABASE_URL: db.url,
      ONEJOB_BOOTSTRAP_KEY: secret,
    });
    expect(run.code).toBe(0);
    expect(run.stdout + run.stderr).not.toContain(secret);
    expect(await keys()).toEqual([{ owner_id: 'platform', scopes: ['ops:read', 'attempts:resolve'] }]);

    const bad = await onejob(['apikey', 'bootstrap'], {
      DATABASE_URL: db.url,
      ONEJOB_BOOTSTRAP_KEY: 'not-a-key-hunter2',
    });
    expect(bad.code).toBe(1);
    expect(bad.stderr).toContain('ONEJOB_BOOTSTRAP_KEY');
    expect(bad.stderr).not.toContain('hunter2');
  }, 60_000);

  it('lists its commands, and refuses an unknown one with exit 2', async () => {
    const help = await onejob([], {});
    expect(help.code).toBe(0);
    expect(help.stderr).toMatch(/onejob apikey/);
    const unknown = await onejob(['rebuild-everything'], {});
    expect(unknown.code).toBe(2);
  });
});
