import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { once } from 'node:events';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';

import pg from 'pg';

import { freePort } from '../src/database/embedded-postgres.js';

const run = promisify(execFile);

/** Debian's packages: postgresql-15-auto-failover (the extension and PostgreSQL 15), pg-auto-failover-cli. */
export const PG_AUTOCTL = process.env.PG_AUTOCTL_BIN ?? '/usr/bin/pg_autoctl';
export const PG_BINDIR = process.env.PG_BINDIR ?? '/usr/lib/postgresql/15/bin';

export function pgAutoFailoverAvailable(): boolean {
  return existsSync(PG_AUTOCTL) && existsSync(join(PG_BINDIR, 'postgres'));
}

export interface FormationNode {
  name: string;
  port: number;
  pgdata: string;
  /** The pg_autoctl supervisor (it runs postgres as its child), in a process group of its own. */
  child?: ChildProcess;
}

export interface NodeState {
  name: string;
  port: number;
  reported: string;
  assigned: string;
}

export interface Formation {
  /** `postgres://...@n1,n2/onejob?target_session_attrs=read-write`: what the service is given. */
  uri: string;
  /** A single-host URL of one node (for the checks, and for a proxy in front of it). */
  urlOf(node: FormationNode): string;
  nodes: FormationNode[];
  states(): Promise<NodeState[]>;
  primary(): Promise<FormationNode>;
  /** Until the formation has one primary and every other node is a secondary (or `timeoutMs` passes). */
  settled(timeoutMs?: number): Promise<FormationNode>;
  /** `pg_autoctl perform failover`: the planned switchover, waited for. */
  performFailover(): Promise<void>;
  /** SIGKILL to the node's supervisor and its postgres: the machine is gone. */
  kill(node: FormationNode): Promise<void>;
  /** Starts a stopped or killed node again: it rejoins as a secondary (pg_rewind where needed). */
  restart(node: FormationNode): Promise<void>;
  /** `pg_autoctl set node replication-quorum` of a standby: false makes the primary replicate to it asynchronously. */
  setReplicationQuorum(node: FormationNode, quorum: boolean): Promise<void>;
  /**
   * The primary demoted in place, its sessions left open (as a role swap that keeps sockets does): the node's and the
   * standby's supervisors are frozen (SIGSTOP; their PostgreSQL keeps running), the old primary turns read-only
   * (default_transaction_read_only and a reload), and the standby is promoted by hand. The formation is not
   * managed any more after this: it is the last thing a run does.
   */
  demoteInPlace(primary: FormationNode, standby: FormationNode): Promise<void>;
  /**
   * The primary's WAL sender frozen (SIGSTOP) until the returned function is called: a standby that lags, as one
   * does on a slow network or disk, so that with asynchronous replication a lost primary takes its last commits.
   * (Freezing the standby's receiver instead loses nothing here: what was sent waits in its socket buffer.) A `kill`
   * of that primary meanwhile kills the frozen sender first, as a lost machine takes it along: woken by the kill's
   * SIGCONT it would otherwise send what it held on the other core before its SIGKILL lands, and nothing is lost.
   */
  pauseReplication(primary: FormationNode): Promise<() => void>;
  sql<T = Record<string, unknown>>(node: FormationNode, text: string, values?: unknown[]): Promise<T[]>;
  /** The monitor's events since `since`, one line each (time, node, reported and goal state, description). */
  events(since: Date): Promise<string[]>;
  output(): string;
  stop(): Promise<void>;
}

const asRoot = process.getuid?.() === 0;

/**
 * A pg_auto_failover formation on this machine: a monitor and two PostgreSQL 15 nodes, each on free ports in a
 * folder of its own, with the monitor's health checks shortened so that a lost primary is failed over within
 * seconds. pg_autoctl and PostgreSQL refuse to run as root: as root, they run as `postgres`. Every process is
 * stopped by `stop` (by its process group); the folder is removed.
 */
export async function startFormation(
  options: {
    database?: string;
    /**
     * The monitor's health checks: a check's timeout, and how long a node may be silent before it is unhealthy.
     * Short (the default: 500 ms, 2 s) fails a lost primary over in seconds; on a loaded machine a standby may then
     * be marked unhealthy while it is only slow, and the primary drops synchronous replication (wait_primary).
     */
    healthCheckTimeoutMs?: number;
    unhealthyAfterMs?: number;
  } = {},
): Promise<Formation> {
  const database = options.database ?? 'onejob';
  const dir = mkdtempSync(join(tmpdir(), 'onejob-paf-'));
  chmodSync(dir, 0o777);
  const env = {
    PATH: `${PG_BINDIR}:/usr/sbin:/usr/bin:/sbin:/bin`,
    XDG_CONFIG_HOME: join(dir, 'config'),
    XDG_DATA_HOME: join(dir, 'data'),
    XDG_RUNTIME_DIR: join(dir, 'run'),
    // pg_autoctl's own variable for the socket folder: one of this formation's, not /var/run/postgresql.
    PG_REGRESS_SOCK_DIR: join(dir, 'run'),
    PGHOST: '127.0.0.1',
  };
  for (const sub of ['config', 'data', 'run']) mkdirSync(join(dir, sub), { recursive: true, mode: 0o777 });
  if (asRoot) await run('chown', ['-R', 'postgres', dir]);
  let text = '';
  const command = (args: string[]) =>
    asRoot ? ['runuser', ['-u', 'postgres', '--', PG_AUTOCTL, ...args]] : [PG_AUTOCTL, args];
  const ctl = async (args: string[]) => {
    const [file, argv] = command(args) as [string, string[]];
    const { stdout } = await run(file, argv, { env, maxBuffer: 16 * 1024 * 1024, timeout: 120_000 });
    return stdout;
  };
  const supervise = (args: string[]): ChildProcess => {
    const [file, argv] = command(args) as [string, string[]];
    const child = spawn(file, argv, { env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
    const tag = args[args.indexOf('--pgdata') + 1]?.split('/').pop();
    const keep = (chunk: Buffer) => {
      text += chunk
        .toString()
        .split('\n')
        .filter((line) => line && !line.includes(' DEBUG '))
        .map((line) => `[${tag}] ${line}\n`)
        .join('');
      if (text.length > 2_000_000) text = text.slice(-1_000_000);
    };
    child.stdout!.on('data', keep);
    child.stderr!.on('data', keep);
    return child;
  };
  const monitorPort = await freePort();
  const monitorData = join(dir, 'monitor');
  const monitorUrl = `postgres://autoctl_node@127.0.0.1:${monitorPort}/pg_auto_failover?sslmode=disable`;
  const monitor = supervise([
    'create',
    'monitor',
    '--pgdata',
    monitorData,
    '--pgport',
    String(monitorPort),
    '--hostname',
    '127.0.0.1',
    '--auth',
    'trust',
    '--no-ssl',
    '--run',
  ]);
  const nodes: FormationNode[] = [];
  for (const name of ['node1', 'node2']) nodes.push({ name, port: await freePort(), pgdata: join(dir, name) });
  const urlOf = (node: FormationNode) => `postgres://postgres@127.0.0.1:${node.port}/${database}`;
  const adminOf = (port: number, db: string) => `postgres://postgres@127.0.0.1:${port}/${db}`;
  const sqlAt = async <T>(url: string, textSql: string, values?: unknown[]) => {
    const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 3000 });
    client.on('error', () => undefined);
    await client.connect();
    try {
      return (await client.query(textSql, values)).rows as T[];
    } finally {
      await client.end().catch(() => undefined);
    }
  };
  /** WAL senders frozen by pauseReplication, per primary: `kill` kills them first. */
  const frozenSenders = new Map<FormationNode, number[]>();
  const until = async (what: string, check: () => Promise<boolean>, timeoutMs: number) => {
    const end = Date.now() + timeoutMs;
    for (;;) {
      try {
        if (await check()) return;
      } catch {
        // not yet
      }
      if (Date.now() > end) {
        throw new Error(`pg_auto_failover: ${what} not within ${timeoutMs} ms\n${text.slice(-6000)}`);
      }
      await new Promise((r) => setTimeout(r, 250));
    }
  };
  const signalGroup = (child: ChildProcess | undefined, signal: NodeJS.Signals) => {
    try {
      if (child?.pid) process.kill(-child.pid, signal);
    } catch {
      // gone already
    }
  };
  const stopGroup = async (child: ChildProcess | undefined, signal: NodeJS.Signals) => {
    if (!child?.pid || child.exitCode !== null || child.signalCode !== null) return;
    const exited = once(child, 'exit');
    signalGroup(child, 'SIGCONT');
    signalGroup(child, signal);
    const timer = setTimeout(() => signalGroup(child, 'SIGKILL'), 20_000);
    await exited;
    clearTimeout(timer);
    // A postmaster outlives its supervisor for a moment: the group is killed once the supervisor is gone.
    if (signal !== 'SIGKILL') signalGroup(child, 'SIGKILL');
  };
  /** Every process of the node's group but its postmaster and the postmaster's children. */
  const supervisors = async (node: FormationNode): Promise<number[]> => {
    const postmaster = Number(readFileSync(join(node.pgdata, 'postmaster.pid'), 'utf8').split('\n')[0]);
    const { stdout } = await run('ps', ['-eo', 'pid=,ppid=,pgid=']);
    const rows = stdout
      .trim()
      .split('\n')
      .map((line) => line.trim().split(/\s+/).map(Number))
      .filter(([, , pgid]) => pgid === node.child!.pid);
    return rows.filter(([pid, ppid]) => pid !== postmaster && ppid !== postmaster).map(([pid]) => pid);
  };
  const nodeArgs = (node: FormationNode) => [
    'create',
    'postgres',
    '--pgdata',
    node.pgdata,
    '--pgport',
    String(node.port),
    '--hostname',
    '127.0.0.1',
    '--name',
    node.name,
    '--dbname',
    database,
    '--auth',
    'trust',
    '--no-ssl',
    '--pgctl',
    join(PG_BINDIR, 'pg_ctl'),
    '--monitor',
    monitorUrl,
    '--run',
  ];
  const states = async (): Promise<NodeState[]> => {
    const rows = await sqlAt<{ nodename: string; nodeport: number; reportedstate: string; goalstate: string }>(
      adminOf(monitorPort, 'pg_auto_failover'),
      'SELECT nodename, nodeport, reportedstate::text, goalstate::text FROM pgautofailover.node ORDER BY nodeid',
    );
    return rows.map((r) => ({ name: r.nodename, port: r.nodeport, reported: r.reportedstate, assigned: r.goalstate }));
  };
  // single: alone; wait_primary: writable, its standby away (asynchronous until it is back); primary: with it.
  const writable = new Set(['single', 'wait_primary', 'primary']);
  const primaryNow = async () => {
    const primary = (await states()).find((s) => writable.has(s.reported) && s.reported === s.assigned);
    return primary && nodes.find((n) => n.name === primary.name);
  };
  const settled = async (timeoutMs = 90_000) => {
    await until(
      'one primary and a secondary',
      async () => {
        const all = await states();
        return (
          all.length === nodes.length &&
          all.filter((s) => s.reported === 'primary' && s.assigned === 'primary').length === 1 &&
          all.filter((s) => s.reported === 'secondary' && s.assigned === 'secondary').length === nodes.length - 1
        );
      },
      timeoutMs,
    );
    return (await primaryNow())!;
  };
  const formation: Formation = {
    uri:
      `postgres://postgres@${nodes.map((n) => `127.0.0.1:${n.port}`).join(',')}/${database}` +
      '?target_session_attrs=read-write',
    urlOf,
    nodes,
    states,
    primary: async () => {
      const primary = await primaryNow();
      if (!primary) throw new Error('pg_auto_failover: no primary now');
      return primary;
    },
    settled,
    performFailover: async () => {
      await ctl(['perform', 'failover', '--pgdata', monitorData, '--wait', '60']);
    },
    kill: async (node) => {
      for (const pid of frozenSenders.get(node) ?? []) {
        try {
          process.kill(pid, 'SIGKILL');
        } catch {
          // gone already
        }
      }
      frozenSenders.delete(node);
      await stopGroup(node.child, 'SIGKILL');
      // The postmaster's children notice it gone; wait until the port is free for the restart.
      await until('the killed node to let go of its port', async () => !(await listening(node.port)), 30_000);
    },
    restart: async (node) => {
      node.child = supervise(['run', '--pgdata', node.pgdata]);
    },
    setReplicationQuorum: async (node, quorum) => {
      await ctl(['set', 'node', 'replication-quorum', String(quorum), '--pgdata', node.pgdata]);
    },
    demoteInPlace: async (primary, standby) => {
      for (const node of [primary, standby]) for (const pid of await supervisors(node)) process.kill(pid, 'SIGSTOP');
      await sqlAt(urlOf(primary), 'ALTER SYSTEM SET default_transaction_read_only = on');
      await sqlAt(urlOf(primary), 'SELECT pg_reload_conf()');
      await sqlAt(urlOf(standby), 'SELECT pg_promote(true, 30)');
    },
    pauseReplication: async (primary) => {
      const [{ pid }] = await sqlAt<{ pid: number }>(urlOf(primary), 'SELECT pid FROM pg_stat_replication');
      process.kill(pid, 'SIGSTOP');
      frozenSenders.set(primary, [...(frozenSenders.get(primary) ?? []), pid]);
      return () => {
        frozenSenders.delete(primary);
        try {
          process.kill(pid, 'SIGCONT');
        } catch {
          // it ended with its primary
        }
      };
    },
    sql: (node, textSql, values) => sqlAt(urlOf(node), textSql, values),
    output: () => text,
    events: async (since) =>
      (
        await sqlAt<{ line: string }>(
          adminOf(monitorPort, 'pg_auto_failover'),
          `SELECT concat_ws(' ', to_char(eventtime, 'HH24:MI:SS.MS'), nodename, reportedstate || '->' || goalstate,
                  description) AS line
             FROM pgautofailover.event WHERE eventtime >= $1 ORDER BY eventid`,
          [since],
        )
      ).map((r) => r.line),
    stop: async () => {
      for (const node of nodes) await stopGroup(node.child, 'SIGTERM');
      await stopGroup(monitor, 'SIGTERM');
      rmSync(dir, { recursive: true, force: true });
    },
  };
  try {
    await until('the monitor', () => listening(monitorPort), 60_000);
    await until(
      'the monitor extension',
      async () => {
        await sqlAt(adminOf(monitorPort, 'pg_auto_failover'), 'SELECT 1 FROM pgautofailover.node LIMIT 1');
        return true;
      },
      60_000,
    );
    // Health checks every 500 ms; a node silent for 2 s is unhealthy: a lost primary fails over in seconds.
    for (const [name, value] of [
      ['pgautofailover.health_check_period', '500'],
      ['pgautofailover.health_check_timeout', String(options.healthCheckTimeoutMs ?? 500)],
      ['pgautofailover.health_check_max_retries', '1'],
      ['pgautofailover.health_check_retry_delay', '200'],
      ['pgautofailover.node_considered_unhealthy_timeout', String(options.unhealthyAfterMs ?? 2000)],
      // The wait for a lost primary to demote itself before its standby is promoted (30 s by default): the node is
      // gone here, whole.
      ['pgautofailover.primary_demote_timeout', '2000'],
    ]) {
      await sqlAt(adminOf(monitorPort, 'postgres'), `ALTER SYSTEM SET ${name} = '${value}'`);
    }
    await sqlAt(adminOf(monitorPort, 'postgres'), 'SELECT pg_reload_conf()');
    nodes[0].child = supervise(nodeArgs(nodes[0]));
    await until('node1 as the first primary', async () => (await primaryNow())?.name === 'node1', 90_000);
    // The standby's base backup starts with a checkpoint: one now leaves it nothing to write.
    await sqlAt(urlOf(nodes[0]), 'CHECKPOINT');
    nodes[1].child = supervise(nodeArgs(nodes[1]));
    await settled(120_000);
    return formation;
  } catch (error) {
    await formation.stop();
    throw error;
  }
}

async function listening(port: number): Promise<boolean> {
  const client = new pg.Client({
    host: '127.0.0.1',
    port,
    user: 'postgres',
    database: 'postgres',
    connectionTimeoutMillis: 500,
  });
  client.on('error', () => undefined);
  try {
    await client.connect();
    return true;
  } catch (error) {
    // Refused: nothing listens. Anything else (starting up, in recovery, auth): something does.
    return (error as { code?: string }).code !== 'ECONNREFUSED';
  } finally {
    await client.end().catch(() => undefined);
  }
}
