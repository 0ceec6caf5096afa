/**
 * `failover`: a PostgreSQL primary replaced under load (docs/operations.md#failover, docs/benchmarks.md#failover).
 * pg_auto_failover (a monitor and two nodes replicating synchronously) and the service as an API and a worker
 * process, on the multi-host URL and, apart, through a TCP proxy repointed to the promoted node; FAILOVERS of each
 * kind on each: the primary killed (supervisor and postmaster), a planned switchover, the primary demoted in place
 * (read-only with its sessions open, the standby promoted by hand: a formation of its own each time). Creates at
 * RATE/s on a provider answering in 600 ms (the fake, which counts calls per job). Per failover: the write gap (the
 * failover's start to writes back, the longest time without a 201), created→started of a job created 5 s after
 * writes are back against the same before the failover, acknowledged creates lost, jobs with two winning attempts,
 * provider calls per job. About 4 minutes per 5 failovers of a kind on an engine.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { parse, stringify } from 'yaml';

import { freePort } from '../src/database/embedded-postgres.js';
import { createLoad, percentile, writeUnavailableMs } from './failover-load.js';
import { FakeOpenAiServer } from './fake-openai.server.js';
import { sleep } from './load.js';
import { type Formation, pgAutoFailoverAvailable, startFormation } from './pg-auto-failover.js';
import { startTcpProxy, type TcpProxy } from './tcp-proxy.js';

export type FailoverKind = 'kill' | 'switchover' | 'demotion';
export type FailoverEngine = 'multi-host' | 'proxy';

export interface FailoverRow {
  engine: FailoverEngine;
  kind: FailoverKind;
  failovers: number;
  writeGapMs: { p50: number; max: number };
  /** created→started of a job created 5 s after writes were back, over the same measured before the failover. */
  startedAfterMs: { p50: number; max: number };
  startedBeforeMs: { p50: number };
  acknowledged: number;
  lost: number;
  twoWinners: number;
  /** Provider calls per job at the fake: the largest, and how many jobs had more than one. */
  callsPerJob: { max: number; jobsOverOne: number };
  non503Errors: number;
}

const RATE = 10;
const BEFORE_MS = 3_000;
const LOAD_MS = 12_000;

interface Service {
  url: string;
  child: ChildProcess;
  stop(): Promise<void>;
}

async function startService(env: Record<string, string>): Promise<Service> {
  const port = await freePort();
  const child = spawn(process.execPath, ['dist/src/main.js'], {
    env: { PATH: process.env.PATH ?? '', HOST: '127.0.0.1', PORT: String(port), LOG_LEVEL: 'warn', ...env },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let text = '';
  child.stderr!.on('data', (c: Buffer) => (text = (text + c.toString()).slice(-20_000)));
  const url = `http://127.0.0.1:${port}`;
  const until = Date.now() + 90_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`service exited: ${text}`);
    const ok = await fetch(`${url}/health/ready`).then(
      (r) => r.ok,
      () => false,
    );
    if (ok) break;
    if (Date.now() > until) throw new Error(`service not ready: ${text}`);
    await sleep(200);
  }
  return {
    url,
    child,
    stop: async () => {
      if (child.exitCode !== null) return;
      const exited = once(child, 'exit');
      child.kill('SIGTERM');
      await exited;
    },
  };
}

function catalog(fakeUrl: string): string {
  const base = parse(readFileSync('bench/catalog.bench.yaml', 'utf8')) as { providers: unknown[] };
  base.providers.push({
    name: 'bench-failover',
    kind: 'openai',
    model: 'gpt-4o-mini',
    baseUrl: fakeUrl,
    apiKeyEnv: 'BENCH_FAKE_OPENAI_KEY',
    timeoutMs: 8000,
    hardTimeoutMs: 20000,
  });
  const file = join(mkdtempSync(join(tmpdir(), 'onejob-bench-failover-')), 'catalog.yaml');
  writeFileSync(file, stringify(base));
  return file;
}

const createdToStarted = async (url: string, key: string, apiKey: string): Promise<number> => {
  const body = { operation: 'summarize', input: { text: key }, providers: ['bench-failover'] };
  const headers = { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json', 'idempotency-key': key };
  const created = (await (
    await fetch(`${url}/v1/jobs`, { method: 'POST', headers, body: JSON.stringify(body) })
  ).json()) as {
    id: string;
  };
  const until = Date.now() + 30_000;
  while (Date.now() < until) {
    const job = (await (
      await fetch(`${url}/v1/jobs/${created.id}`, { headers: { authorization: `Bearer ${apiKey}` } })
    ).json()) as { createdAt: string; attempts: Array<{ startedAt: string | null }> };
    const started = job.attempts[0]?.startedAt;
    if (started) return new Date(started).getTime() - new Date(job.createdAt).getTime();
    await sleep(20);
  }
  return NaN;
};

export async function failoverCase(options: { failovers?: number; run: string }): Promise<FailoverRow[]> {
  if (!pgAutoFailoverAvailable()) {
    throw new Error('failover: needs postgresql-15-auto-failover and pg-auto-failover-cli (apt-get install -y ...)');
  }
  const failovers = options.failovers ?? 5;
  const fake = await new FakeOpenAiServer().start();
  fake.always({ kind: 'json', content: { summary: 'fine' }, delayMs: 600 });
  const catalogFile = catalog(fake.url);
  const rows: FailoverRow[] = [];
  try {
    for (const engine of ['multi-host', 'proxy'] as const) {
      for (const kind of ['kill', 'switchover', 'demotion'] as const) {
        rows.push(await measure(engine, kind, failovers, catalogFile, fake, options.run));
      }
    }
  } finally {
    await fake.stop();
  }
  return rows;
}

async function measure(
  engine: FailoverEngine,
  kind: FailoverKind,
  failovers: number,
  catalogFile: string,
  fake: FakeOpenAiServer,
  run: string,
): Promise<FailoverRow> {
  const gaps: number[] = [];
  const after: number[] = [];
  const before: number[] = [];
  let acknowledged = 0;
  let lost = 0;
  let twoWinners = 0;
  let non503 = 0;
  const calls = new Map<string, number>();
  let formation: Formation | undefined;
  let proxy: TcpProxy | undefined;
  let services: Service[] = [];
  const up = async () => {
    formation = await startFormation();
    const primary = await formation.primary();
    proxy = await startTcpProxy('127.0.0.1', primary.port);
    const url = engine === 'proxy' ? `postgres://postgres@127.0.0.1:${proxy.port}/onejob` : formation.uri;
    const env = {
      DATABASE_URL: url,
      CATALOG_FILE: catalogFile,
      BENCH_FAKE_OPENAI_KEY: 'sk-bench',
      WORKER_POLL_MS: '500',
      RECONCILE_INTERVAL_MS: '1000',
    };
    const api = await startService({ ...env, ROLE: 'api' });
    services = [api, await startService({ ...env, ROLE: 'worker' })];
    const made = spawnSync(
      process.execPath,
      ['dist/src/auth/apikey.cli.js', 'create', '--owner', 'bench-failover', '--scopes', 'jobs:write,jobs:read'],
      { env: { PATH: process.env.PATH ?? '', DATABASE_URL: formation.uri }, encoding: 'utf8', timeout: 60_000 },
    );
    return made.stdout.trim().split('\n').pop()!;
  };
  const down = async () => {
    for (const s of services) await s.stop();
    await proxy?.close();
    await formation?.stop();
  };
  let apiKey = '';
  try {
    for (let n = 0; n < failovers; n++) {
      if (!formation) apiKey = await up();
      const f = formation!;
      const prefix = `${run}-${engine}-${kind}-${n}-`;
      before.push(await createdToStarted(services[0].url, `${prefix}before`, apiKey));
      const load = createLoad({
        apiUrl: services[0].url,
        apiKey,
        keyPrefix: prefix,
        rate: RATE,
        durationMs: LOAD_MS,
        body: (i) => ({ operation: 'summarize', input: { text: `${prefix}${i}` }, providers: ['bench-failover'] }),
      });
      await sleep(BEFORE_MS);
      const primary = await f.primary();
      const standby = f.nodes.find((node) => node.name !== primary.name)!;
      const at = Date.now();
      if (kind === 'kill') {
        await f.kill(primary);
        const until = Date.now() + 60_000;
        while ((await f.primary().catch(() => primary)).name === primary.name && Date.now() < until) await sleep(200);
      } else if (kind === 'switchover') {
        await f.performFailover();
      } else {
        await f.demoteInPlace(primary, standby);
      }
      proxy!.retarget('127.0.0.1', (kind === 'demotion' ? standby : await f.primary()).port, {
        dropExisting: kind !== 'demotion',
      });
      const answers = await load;
      const gap = writeUnavailableMs(answers, at) ?? NaN;
      gaps.push(gap);
      await sleep(Math.max(0, at + gap + 5_000 - Date.now()));
      after.push(await createdToStarted(services[0].url, `${prefix}after`, apiKey));
      const acked = answers.filter((a) => a.status === 201 || a.status === 200);
      acknowledged += acked.length;
      non503 += answers.filter((a) => a.unexpected.length).length;
      const target = kind === 'demotion' ? standby : await f.primary();
      await sleep(8_000); // the jobs in flight settle
      const rows = await f.sql<{ idempotency_key: string; won: number }>(
        target,
        `SELECT j.idempotency_key,
                (SELECT count(*)::int FROM attempts a WHERE a.job_id = j.id AND a.outcome = 'won') AS won
           FROM jobs j WHERE j.idempotency_key LIKE $1`,
        [`${prefix}%`],
      );
      const held = new Set(rows.map((r) => r.idempotency_key));
      lost += acked.filter((a) => !held.has(a.key)).length;
      twoWinners += rows.filter((r) => r.won > 1).length;
      if (kind === 'kill') {
        await f.restart(primary);
        await f.settled(120_000);
      } else if (kind === 'demotion') {
        await down();
        formation = undefined;
      }
    }
  } finally {
    if (formation) await down();
  }
  const ours = new RegExp(`${run}-${engine}-${kind}-\\d+-(\\d+|before|after)`);
  for (const request of fake.requests) {
    const key = ours.exec(JSON.stringify(request.body.messages ?? ''))?.[0];
    if (key) calls.set(key, (calls.get(key) ?? 0) + 1);
  }
  return {
    engine,
    kind,
    failovers,
    writeGapMs: { p50: percentile(gaps, 50), max: Math.max(...gaps) },
    startedAfterMs: { p50: percentile(after, 50), max: Math.max(...after) },
    startedBeforeMs: { p50: percentile(before, 50) },
    acknowledged,
    lost,
    twoWinners,
    callsPerJob: { max: Math.max(0, ...calls.values()), jobsOverOne: [...calls.values()].filter((c) => c > 1).length },
    non503Errors: non503,
  };
}

export function failoverTable(rows: FailoverRow[]): string {
  const s = (ms: number) => (Number.isFinite(ms) ? (ms / 1000).toFixed(1) : 'n/a');
  return [
    '| engine | kind | failovers | write gap p50 / max s | created→started after / before ms (p50) | after max ms | acknowledged | lost | two winners | calls/job max (jobs > 1) | non-503 errors |',
    '|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
    ...rows.map(
      (r) =>
        `| ${r.engine} | ${r.kind} | ${r.failovers} | ${s(r.writeGapMs.p50)} / ${s(r.writeGapMs.max)} | ` +
        `${Math.round(r.startedAfterMs.p50)} / ${Math.round(r.startedBeforeMs.p50)} | ${Math.round(r.startedAfterMs.max)} | ` +
        `${r.acknowledged} | ${r.lost} | ${r.twoWinners} | ${r.callsPerJob.max} (${r.callsPerJob.jobsOverOne}) | ${r.non503Errors} |`,
    ),
  ].join('\n');
}
