import { rmSync } from 'node:fs';

export default async function globalTeardown() {
  const pg = globalThis.__ONEJOB_PG__;
  if (!pg) return;
  await pg.server.stop();
  rmSync(pg.dir, { recursive: true, force: true });
}
