import { chmodSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { postmasterState, startEmbeddedPostgres } from '../src/database/embedded-postgres.js';
import { TEST_CATALOG } from './helpers/app.js';
import { spawnService, waitUntilReady } from './helpers/process.js';
import { waitFor } from './helpers/wait.js';

function dataDir(): string {
  // As root the embedded server runs as `postgres`, which must be able to write the folder.
  const dir = mkdtempSync(join(tmpdir(), 'onejob-embedded-'));
  chmodSync(dir, 0o777);
  return dir;
}

function postmasterPid(dir: string): number | undefined {
  try {
    return Number(readFileSync(join(dir, 'pg', 'postmaster.pid'), 'utf8').split('\n')[0]);
  } catch {
    return undefined;
  }
}

/** Issue 11 item 11: the embedded PostgreSQL of `npm start` (DATABASE_URL unset). */
describe('the embedded PostgreSQL of a data directory', () => {
  const dirs: string[] = [];
  afterAll(() => {
    for (const dir of dirs) {
      const pid = postmasterPid(dir);
      if (pid) process.kill(pid, 'SIGINT');
    }
    // The servers stop asynchronously; their folders are temporary.
    setTimeout(() => dirs.forEach((dir) => rmSync(dir, { recursive: true, force: true })), 3000).unref();
  });

  it('generates a superuser password per data directory, kept in it with mode 0600', async () => {
    const [a, b] = [dataDir(), dataDir()];
    dirs.push(a, b);
    // The package's exit hooks beyond `exit` are left out at its first import (here): SIGTERM and SIGINT would cut
    // the drain short, and a `message` listener keeps a process forked with an IPC channel alive for good.
    const hooked = () => ['SIGTERM', 'SIGINT', 'message'].map((event) => process.listenerCount(event));
    const before = hooked();
    const first = await startEmbeddedPostgres({ dataDir: a, database: 'one' });
    expect(hooked()).toEqual(before);
    const second = await startEmbeddedPostgres({ dataDir: b, database: 'two' });
    try {
      const passwordOf = (url: string) => decodeURIComponent(new URL(url).password);
      expect(passwordOf(first.url)).not.toBe('onejob');
      expect(passwordOf(first.url).length).toBeGreaterThanOrEqual(24);
      expect(passwordOf(first.url)).not.toBe(passwordOf(second.url));
      expect(readFileSync(join(a, 'postgres-password'), 'utf8').trim()).toBe(passwordOf(first.url));
      expect(statSync(join(a, 'postgres-password')).mode & 0o777).toBe(0o600);
    } finally {
      await first.stop();
      await second.stop();
    }
    // The next start of the same folder uses the same password.
    const again = await startEmbeddedPostgres({ dataDir: a, database: 'one' });
    try {
      expect(again.url).toBe(first.url.replace(/:\d+\//, `:${new URL(again.url).port}/`));
    } finally {
      await again.stop();
    }
  }, 90_000);

  it('stops its PostgreSQL when a SIGTERM comes while it is still starting', async () => {
    const dir = dataDir();
    dirs.push(dir);
    const service = await spawnService({ DATA_DIR: dir, CATALOG_FILE: TEST_CATALOG });
    // The server is up and the service is migrating, not yet listening: Node's default would end at once.
    await waitFor(
      async () => postmasterState(join(dir, 'pg')).state,
      (state) => state === 'in-use',
      60_000,
      5,
    );
    service.kill('SIGTERM');
    expect(await service.exited).toEqual({ code: 0, signal: null });
    expect(postmasterState(join(dir, 'pg'))).toEqual({ state: 'none' });
  }, 90_000);

  it('starts again on the same DATA_DIR after the service was SIGKILLed and left its PostgreSQL running', async () => {
    const dir = dataDir();
    dirs.push(dir);
    const env = { DATA_DIR: dir, CATALOG_FILE: TEST_CATALOG };
    const first = await spawnService(env);
    await waitUntilReady(first, 60_000);
    const orphanPid = postmasterPid(dir)!;
    first.kill('SIGKILL');
    await first.exited;
    expect(postmasterState(join(dir, 'pg'))).toMatchObject({ state: 'orphan', pid: orphanPid });

    const second = await spawnService(env);
    try {
      await waitUntilReady(second, 60_000);
      expect(second.output()).toContain(
        `stopping the PostgreSQL (pid ${orphanPid}) left running by a onejob that was killed`,
      );
      expect(postmasterPid(dir)).not.toBe(orphanPid);
      expect(postmasterState(join(dir, 'pg'))).toMatchObject({ state: 'in-use' });
    } finally {
      second.kill('SIGTERM');
      await second.exited;
    }
    expect(postmasterState(join(dir, 'pg'))).toEqual({ state: 'none' });
  }, 120_000);
});
