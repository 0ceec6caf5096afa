import { spawnSync } from 'node:child_process';
import { getEventListeners } from 'node:events';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

import { deadline } from './deadline.js';

// A forced full collection, without starting the test process with --expose-gc.
setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Makes 16 signals in a frame of their own, so that only what the runtime keeps holds them once it returns. */
function arm(make: () => AbortSignal): { fired: () => number } {
  let fired = 0;
  for (let i = 0; i < 16; i++) make().addEventListener('abort', () => fired++);
  return { fired: () => fired };
}

describe('deadline', () => {
  it('fires all 16 deadlines after a full GC (a composed AbortSignal.any does not, on Node 20)', async () => {
    const shutdown = new AbortController();
    const ours = arm(() => deadline(150, shutdown.signal).signal);
    await sleep(20);
    gc();
    await sleep(400);
    expect(ours.fired()).toBe(16);
  });

  it('aborts with a TimeoutError when the time is up, with the source reason when a source aborts first', async () => {
    const shutdown = new AbortController();
    const timed = deadline(20, shutdown.signal);
    await sleep(60);
    expect(timed.signal.aborted).toBe(true);
    expect((timed.signal.reason as DOMException).name).toBe('TimeoutError');

    const followed = deadline(10_000, shutdown.signal);
    shutdown.abort(new Error('stopping'));
    expect(followed.signal.aborted).toBe(true);
    expect((followed.signal.reason as Error).message).toBe('stopping');
  });

  it('is aborted at once when a source already is', () => {
    const gone = AbortSignal.abort('gone');
    expect(deadline(10_000, undefined, gone).signal.reason).toBe('gone');
  });

  it('unhooks its sources on clear, so a long-lived signal gathers no listeners', async () => {
    const shutdown = new AbortController();
    const pending = Array.from({ length: 100 }, () => deadline(10_000, shutdown.signal));
    expect(getEventListeners(shutdown.signal, 'abort')).toHaveLength(100);
    for (const d of pending) d.clear();
    expect(getEventListeners(shutdown.signal, 'abort')).toHaveLength(0);
    const cleared = deadline(20, shutdown.signal);
    cleared.clear();
    await sleep(60);
    expect(cleared.signal.aborted).toBe(false);
  });

  it('lets 50 calls follow one shutdown signal without a MaxListenersExceededWarning (the build, in a process)', () => {
    // Node prints the warning from its own realm; jest's sandbox has other AbortSignals, so ask a real process.
    const url = JSON.stringify(pathToFileURL(resolve('dist/src/common/deadline.js')).href);
    const script = `
      const { deadline, shutdownController } = await import(${url});
      const shutdown = shutdownController();
      const deadlines = Array.from({ length: 50 }, () => deadline(60_000, shutdown.signal));
      shutdown.abort();
      await new Promise((r) => setTimeout(r, 50));
      console.log(deadlines.filter((d) => d.signal.aborted).length);`;
    // Without the test runner's NODE_OPTIONS (--no-warnings).
    const env = { PATH: process.env.PATH ?? '' };
    const run = spawnSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8', env });
    expect(run.stdout.trim()).toBe('50');
    expect(run.stderr).not.toContain('MaxListenersExceededWarning');
  });
});
