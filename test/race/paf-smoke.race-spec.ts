import { writeFileSync } from 'node:fs';

import { startFormation } from '../../bench/pg-auto-failover.js';

it('smoke', async () => {
  const t0 = Date.now();
  const f = await startFormation();
  const lap = (m: string) => process.stderr.write(`${m} +${((Date.now() - t0) / 1000).toFixed(1)}s\n`);
  try {
    lap('up');
    lap('gucs ' + JSON.stringify(await f.sql(f.nodes[0], "SELECT 1")));
    await f.performFailover();
    lap('switchover ' + (await f.primary()).name);
    const victim = await f.primary();
    const k0 = Date.now();
    await f.kill(victim);
    for (;;) {
      const p = await f.primary().catch(() => undefined);
      if (p && p.name !== victim.name) break;
      await new Promise((r) => setTimeout(r, 200));
    }
    lap(`kill promoted in ${Date.now() - k0} ms`);
    await f.restart(victim);
    await f.settled(120_000);
    lap('rejoined ' + JSON.stringify(await f.states()));
  } finally {
    writeFileSync('/tmp/failover-smoke-out.log', f.output());
    await f.stop();
    lap('stopped');
  }
}, 400_000);
