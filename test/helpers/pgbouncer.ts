import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { chmodSync, existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import pg from 'pg';

import { freePort } from '../../src/database/embedded-postgres.js';

export const PGBOUNCER_BIN = process.env.PGBOUNCER_BIN ?? '/usr/sbin/pgbouncer';

export function pgbouncerAvailable(): boolean {
  return existsSync(PGBOUNCER_BIN);
}

export interface PgBouncer {
  /** The pooled URL of `database` (same user and password as the direct one). */
  url: string;
  /** SHOW STATS of the admin console: per database, the transactions and queries PgBouncer served. */
  stats(): Promise<Array<Record<string, string>>>;
  output(): string;
  stop(): Promise<void>;
}

/**
 * Debian's PgBouncer in transaction pooling mode in front of `directUrl`, on a free port, with a generated ini and
 * userlist. `poolSize` server connections serve every client, so sessions are really shared between processes.
 */
export async function startPgBouncer(directUrl: string, poolSize: number): Promise<PgBouncer> {
  const direct = new URL(directUrl);
  const user = decodeURIComponent(direct.username);
  const password = decodeURIComponent(direct.password);
  const database = direct.pathname.slice(1);
  const dir = mkdtempSync(join(tmpdir(), 'onejob-pgbouncer-'));
  // PgBouncer refuses to run as root; as root it switches to `postgres` (Debian's package user), which must read these.
  chmodSync(dir, 0o755);
  const port = await freePort();
  writeFileSync(join(dir, 'userlist.txt'), `"${user}" "${password}"\n`, { mode: 0o644 });
  writeFileSync(
    join(dir, 'pgbouncer.ini'),
    [
      '[databases]',
      `${database} = host=${direct.hostname} port=${direct.port} dbname=${database}`,
      '[pgbouncer]',
      'listen_addr = 127.0.0.1',
      `listen_port = ${port}`,
      'unix_socket_dir =',
      // md5 between clients and PgBouncer (single-threaded: a burst of SCRAM logins would stall it on a loaded
      // machine); PgBouncer logs in to PostgreSQL with SCRAM, from the plain password in the userlist.
      'auth_type = md5',
      `auth_file = ${join(dir, 'userlist.txt')}`,
      `admin_users = ${user}`,
      'pool_mode = transaction',
      `default_pool_size = ${poolSize}`,
      'max_client_conn = 2000',
      // The service must not depend on these: refuse nothing silently (no ignore_startup_parameters).
      'server_reset_query =',
      ...(process.getuid?.() === 0 ? ['user = postgres'] : []),
    ].join('\n') + '\n',
    { mode: 0o644 },
  );
  const child: ChildProcess = spawn(PGBOUNCER_BIN, [join(dir, 'pgbouncer.ini')], { stdio: ['ignore', 'pipe', 'pipe'] });
  let text = '';
  child.stdout!.on('data', (chunk: Buffer) => (text += chunk.toString()));
  child.stderr!.on('data', (chunk: Buffer) => (text += chunk.toString()));
  const exited = once(child, 'exit');
  const url = new URL(directUrl);
  url.port = String(port);
  url.hostname = '127.0.0.1';
  const admin = new URL(url);
  admin.pathname = '/pgbouncer';
  const stats = async () => {
    const client = new pg.Client({ connectionString: admin.toString() });
    await client.connect();
    try {
      // The admin console speaks the simple query protocol only: no parameters.
      return (await client.query('SHOW STATS')).rows as Array<Record<string, string>>;
    } finally {
      await client.end();
    }
  };
  const until = Date.now() + 10_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`pgbouncer exited at start:\n${text}`);
    try {
      await stats();
      break;
    } catch (error) {
      if (Date.now() > until) {
        throw new Error(`pgbouncer did not accept connections: ${(error as Error).message}\n${text}`, { cause: error });
      }
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  return {
    url: url.toString(),
    stats,
    output: () => text,
    stop: async () => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      await exited;
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
