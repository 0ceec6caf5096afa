/**
 * `fairness`: the targets of fair share between owners (docs/design.md#fair-share; docs/benchmarks.md#fair-share),
 * on a provider capped at maxConcurrency 5 whose calls take 1 s (the fake OpenAI server, which stamps each arrival;
 * its attempt id, the request's Idempotency-Key, names the owner), with three worker processes and an API process:
 * 1. owner A queues 3,000 jobs; owner B then creates 20 jobs, one every 500 ms: how long each of B's waited to start;
 * 2. owners with backlogs of 1,000, 100 and 10, equal weights, then weights 2:1:1: each one's share of the calls
 *    while all three had work, and in every 10 s window of that time.
 */
import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import pg from 'pg';
import { parse, stringify } from 'yaml';

import { FakeOpenAiServer } from './fake-openai.server.js';
import { createJobs, percentiles, sleep } from './load.js';

interface Service {
  child: ChildProcess;
  url: string;
  stop: () => Promise<void>;
}

export interface FairnessContext {
  pool: pg.Pool;
  run: string;
  /** An API key of `owner` with these scopes. */
  createKey: (owner: string, scopes: string) => string;
  startService: (role: 'api' | 'worker', extraEnv: Record<string, string>) => Promise<Service>;
}

export interface ShareRow {
  weights: string;
  backlogs: string;
  /** Calls while all three owners had work, and each one's share of them. */
  calls: number;
  seconds: number;
  shares: Record<string, number>;
  /** The share each should have had (by weight). */
  targets: Record<string, number>;
  /** The largest relative miss of any owner's share, over the whole time and over each 10 s window. */
  worstMissPct: number;
  worstWindowMissPct: number | null;
}

export interface FairnessRow {
  provider: string;
  maxConcurrency: number;
  latencyMs: number;
  workers: number;
  /** Case 1: A's backlog, B's 20 jobs, how long each of B's waited from its create to its claim. */
  backlog: number;
  bWaitMs: { p50: number; p99: number; max: number };
  aLeftWhenBDone: number;
  shares: ShareRow[];
}

const PROVIDER = 'bench-fair';
const MAX_CONCURRENCY = 5;
const LATENCY_MS = 1000;
const WORKERS = 3;
const BACKLOG = 3000;

function fairnessCatalog(fakeUrl: string): string {
  const catalog = parse(readFileSync('bench/catalog.bench.yaml', 'utf8')) as { providers: unknown[] };
  catalog.providers.push({
    name: PROVIDER,
    kind: 'openai',
    model: PROVIDER,
    baseUrl: fakeUrl,
    apiKeyEnv: 'BENCH_FAKE_OPENAI_KEY',
    timeoutMs: 5000,
    hardTimeoutMs: 10_000,
    maxConcurrency: MAX_CONCURRENCY,
  });
  const file = join(mkdtempSync(join(tmpdir(), 'onejob-bench-fairness-')), 'catalog.yaml');
  writeFileSync(file, stringify(catalog));
  return file;
}

export async function fairnessCase(ctx: FairnessContext): Promise<FairnessRow> {
  const fake = await new FakeOpenAiServer().start();
  fake.latencyMs(LATENCY_MS);
  await ctx.pool.query('UPDATE jobs SET next_attempt_at = NULL WHERE next_attempt_at IS NOT NULL');
  const env = { CATALOG_FILE: fairnessCatalog(fake.url), BENCH_FAKE_OPENAI_KEY: 'sk-bench' };
  const services: Service[] = [];
  const owners = ['fair-a', 'fair-b', 'fair-c'];
  const headers = Object.fromEntries(
    owners.map((o) => [
      o,
      { authorization: `Bearer ${ctx.createKey(o, 'jobs:write,jobs:read')}`, 'content-type': 'application/json' },
    ]),
  );
  const admin = {
    authorization: `Bearer ${ctx.createKey('bench-admin', 'owners:write,ops:read')}`,
    'content-type': 'application/json',
  };
  const setShare = async (url: string, owner: string, weight: number, maxConcurrency: number | null) => {
    const res = await fetch(`${url}/v1/ops/owners/${owner}`, {
      method: 'PUT',
      headers: admin,
      body: JSON.stringify({ weight, maxConcurrency }),
    });
    if (res.status !== 200) throw new Error(`PUT /v1/ops/owners answered ${res.status}`);
  };
  const drain = async () => {
    await ctx.pool
      .query(`UPDATE jobs SET status = 'cancelled', version = version + 1, next_attempt_at = NULL, completed_at = now(), updated_at = now()
                           WHERE status IN ('pending', 'running', 'unknown')`);
    for (let i = 0; fake.inFlight > 0 && i < 200; i++) await sleep(100);
    fake.reset();
    fake.latencyMs(LATENCY_MS);
  };
  const arrivals = async () => {
    const seen = fake.requests.map((r) => ({ attemptId: String(r.headers['idempotency-key']), at: r.at }));
    const rows = (
      await ctx.pool.query(
        'SELECT a.id, j.owner_id FROM attempts a JOIN jobs j ON j.id = a.job_id WHERE a.id = ANY($1::uuid[])',
        [seen.map((s) => s.attemptId)],
      )
    ).rows;
    const owner = new Map(rows.map((r) => [r.id as string, r.owner_id as string]));
    return seen.map((s) => ({ owner: owner.get(s.attemptId) ?? '?', at: s.at }));
  };
  try {
    const api = await ctx.startService('api', env);
    services.push(api);
    // One after the other: three starts at once on a loaded 2-core machine can outlast the readiness wait.
    for (let i = 0; i < WORKERS; i++) services.push(await ctx.startService('worker', env));

    // 1. A's backlog, then B's jobs one every 500 ms.
    await createJobs(api.url, headers['fair-a'], {
      prefix: `fa-${ctx.run}`,
      count: BACKLOG,
      senders: 32,
      provider: PROVIDER,
      text: 'a',
    });
    await createJobs(api.url, headers['fair-b'], {
      prefix: `fb-${ctx.run}`,
      count: 20,
      senders: 1,
      provider: PROVIDER,
      text: 'b',
      rate: 2,
    });
    for (let i = 0; i < 100; i++) {
      const { n } = (
        await ctx.pool.query(
          `SELECT count(*)::int AS n FROM jobs WHERE owner_id = 'fair-b' AND idempotency_key LIKE $1 AND status = 'succeeded'`,
          [`fb-${ctx.run}-%`],
        )
      ).rows[0];
      if (n >= 20) break;
      await sleep(200);
    }
    const waits = (
      await ctx.pool.query(
        `SELECT extract(epoch FROM a.claimed_at - j.created_at) * 1000 AS ms FROM jobs j JOIN attempts a ON a.job_id = j.id AND a.number = 1
          WHERE j.idempotency_key LIKE $1`,
        [`fb-${ctx.run}-%`],
      )
    ).rows.map((r) => Number(r.ms));
    const { left } = (
      await ctx.pool.query(`SELECT count(*)::int AS left FROM jobs WHERE owner_id = 'fair-a' AND status = 'pending'`)
    ).rows[0];
    await drain();

    // 2. Three backlogs, held by a cap of 0 while they are created, then let go together.
    const shares: ShareRow[] = [];
    for (const weights of [
      { 'fair-a': 1, 'fair-b': 1, 'fair-c': 1 },
      { 'fair-a': 2, 'fair-b': 1, 'fair-c': 1 },
    ] as Array<Record<string, number>>) {
      const backlogs: Record<string, number> = { 'fair-a': 1000, 'fair-b': 100, 'fair-c': 10 };
      for (const o of owners) await setShare(api.url, o, weights[o], 0);
      const tag = `${ctx.run}-${weights['fair-a']}`;
      for (const o of owners) {
        await createJobs(api.url, headers[o], {
          prefix: `${o}-${tag}`,
          count: backlogs[o],
          senders: 16,
          provider: PROVIDER,
          text: o,
        });
      }
      await Promise.all(owners.map((o) => setShare(api.url, o, weights[o], null)));
      for (let i = 0; i < 600; i++) {
        const { n } = (
          await ctx.pool.query(
            `SELECT count(*)::int AS n FROM jobs WHERE idempotency_key LIKE $1 AND status = 'succeeded'`,
            [`fair-c-${tag}-%`],
          )
        ).rows[0];
        if (n >= backlogs['fair-c']) break;
        await sleep(200);
      }
      const seen = await arrivals();
      const at = (o: string) => seen.filter((s) => s.owner === o).map((s) => s.at);
      const from = Math.max(...owners.map((o) => Math.min(...at(o))));
      const until = Math.min(...owners.map((o) => Math.max(...at(o))));
      const total = Object.values(weights).reduce((a, b) => a + b, 0);
      const targets = Object.fromEntries(owners.map((o) => [o, weights[o] / total]));
      const shareOf = (window: typeof seen) =>
        Object.fromEntries(
          owners.map((o) => [o, window.filter((s) => s.owner === o).length / Math.max(1, window.length)]),
        );
      const miss = (share: Record<string, number>) =>
        Math.max(...owners.map((o) => Math.abs(share[o] - targets[o]) / targets[o])) * 100;
      const inWindow = seen.filter((s) => s.at >= from && s.at <= until);
      const windowMisses: number[] = [];
      for (let start = from; start + 10_000 <= until; start += 1000) {
        windowMisses.push(miss(shareOf(inWindow.filter((s) => s.at >= start && s.at < start + 10_000))));
      }
      const share = shareOf(inWindow);
      shares.push({
        weights: owners.map((o) => weights[o]).join(':'),
        backlogs: owners.map((o) => backlogs[o]).join(' / '),
        calls: inWindow.length,
        seconds: Math.round((until - from) / 100) / 10,
        shares: Object.fromEntries(owners.map((o) => [o, Math.round(share[o] * 1000) / 10])),
        targets: Object.fromEntries(owners.map((o) => [o, Math.round(targets[o] * 1000) / 10])),
        worstMissPct: Math.round(miss(share) * 10) / 10,
        worstWindowMissPct: windowMisses.length ? Math.round(Math.max(...windowMisses) * 10) / 10 : null,
      });
      await drain();
    }
    for (const o of owners) await setShare(api.url, o, 1, null);
    const sorted = [...waits].sort((a, b) => a - b);
    return {
      provider: PROVIDER,
      maxConcurrency: MAX_CONCURRENCY,
      latencyMs: LATENCY_MS,
      workers: WORKERS,
      backlog: BACKLOG,
      bWaitMs: { ...percentiles(waits), max: Math.round(sorted[sorted.length - 1] ?? 0) },
      aLeftWhenBDone: left,
      shares,
    };
  } finally {
    await Promise.all(services.map((s) => s.stop()));
    await fake.stop();
  }
}

export function fairnessTable(row: FairnessRow): string {
  return [
    `owner A's backlog of ${row.backlog} on ${row.provider} (maxConcurrency ${row.maxConcurrency}, ${row.latencyMs} ms calls, ${row.workers} worker processes); ` +
      `B's 20 jobs, one every 500 ms: created→claimed p50 ${row.bWaitMs.p50} ms, p99 ${row.bWaitMs.p99} ms, max ${row.bWaitMs.max} ms; A still had ${row.aLeftWhenBDone} queued`,
    '',
    '| weights A:B:C | backlogs | calls while all three had work | seconds | shares A / B / C % | targets % | worst miss (whole time) | worst miss (any 10 s window) |',
    '|---|---|---:|---:|---|---|---:|---:|',
    ...row.shares.map(
      (s) =>
        `| ${s.weights} | ${s.backlogs} | ${s.calls} | ${s.seconds} | ${Object.values(s.shares).join(' / ')} | ${Object.values(s.targets).join(' / ')} | ${s.worstMissPct}% | ${s.worstWindowMissPct ?? 'n/a'}${s.worstWindowMissPct === null ? '' : '%'} |`,
    ),
  ].join('\n');
}
