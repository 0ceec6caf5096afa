import type pg from 'pg';

/** What a case needs to make databases of its own beside the bench's: the server, and a way to start the service. */
export interface DatabaseMaker {
  admin: pg.Client;
  serverUrl: string;
  run: string;
  startService: (databaseUrl: string, role: 'api') => Promise<{ stop: () => Promise<unknown> }>;
}

/** An empty database of the case's own, `onejob_<prefix>_<label>_<run>` (for a peer, which brings its schema). */
export async function emptyDatabase(
  ctx: Pick<DatabaseMaker, 'admin' | 'serverUrl' | 'run'>,
  prefix: string,
  label: string,
): Promise<string> {
  const name = `onejob_${prefix}_${label}_${ctx.run}`.replace(/\W/g, '_');
  await ctx.admin.query(`CREATE DATABASE ${name}`);
  const url = new URL(ctx.serverUrl);
  url.pathname = `/${name}`;
  return url.toString();
}

/** A database of the case's own, `onejob_<prefix>_<label>_<run>`, with the migrations applied (a ROLE=api start). */
export async function freshDatabase(ctx: DatabaseMaker, prefix: string, label: string): Promise<string> {
  const url = await emptyDatabase(ctx, prefix, label);
  const service = await ctx.startService(url, 'api');
  await service.stop();
  return url;
}

export async function dropDatabase(ctx: Pick<DatabaseMaker, 'admin'>, databaseUrl: string): Promise<void> {
  await ctx.admin.query(`DROP DATABASE IF EXISTS ${new URL(databaseUrl).pathname.slice(1)} WITH (FORCE)`);
}
