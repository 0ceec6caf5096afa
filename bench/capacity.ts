/**
 * `capacity`: a provider capped at `maxConcurrency: 50` whose calls take 1 s, served by the fake OpenAI server
 * (kind openai, through the official SDK), with a backlog shared by three worker processes and an API process.
 * The cap is the limit: settled/s should be within 10 % of 50/s, and the most calls the fake ever serves at once
 * exactly 50 (issue 12; docs/benchmarks.md).
 */
import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import pg from 'pg';
import { parse, stringify } from 'yaml';

import { FakeOpenAiServer } from './fake-openai.server.js';
import { createJobs, percentiles, sleep } from './load.js';

export interface CapacityRow {
  provider: string;
  maxConcurrency: number;
  workers: number;
  latencyMs: number;
  jobs: number;
  settledPerSecond: number;
  /** maxConcurrency / latency: what the cap allows. */
  target: number;
  /** The most requests the fake served at once. */
  fakePeak: number;
  /** The most `running` attempts on the provider seen in the database (sampled every 200 ms). */
  runningPeak: number;
  createdToStartedMs: { p50: number; p99: number };
  createdToSettledMs: { p50: number; p99: number };
  /** An attempt's claim (its lease taken) to its end (lease given back): the provider's 1 s plus the service's share. */
  claimedToFinishedMs: { p50: number; p99: number };
  /** Sampled every 200 ms between the end of creation and the last 100 jobs: leases held, and requests at the fake. */
  steadyMeanLeases: number;
  /** The backlog's creation rate, before the workers start. */
  createdPerSecond: number;
  steadyMeanAtProvider: number;
  /** Where the rest of that goes (the fake knows each call's attempt by its Idempotency-Key): claim to the request's
   * arrival at the fake, and the fake's answer to the attempt's end. */
  claimToArrivalMs: { p50: number; p99: number };
  answerToFinishedMs: { p50: number; p99: number };
}

interface Service {
  child: ChildProcess;
  url: string;
  stop: () => Promise<void>;
}

export interface CapacityContext {
  pool: pg.Pool;
  run: string;
  headers: Record<string, string>;
  startService: (role: 'api' | 'worker', extraEnv: Record<string, string>) => Promise<Service>;
}

const PROVIDER = 'bench-cap';
const MAX_CONCURRENCY = 50;
const LATENCY_MS = 1000;
const WORKERS = 3;
const JOBS = 1500;

/** The bench catalog plus the capped provider pointing at the fake (its URL is known only once it listens). */
function capacityCatalog(fakeUrl: string): string {
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
  const file = join(mkdtempSync(join(tmpdir(), 'onejob-bench-capacity-')), 'catalog.yaml');
  writeFileSync(file, stringify(catalog));
  return file;
}

const mean = (xs: number[]) => (xs.length ? Math.round((xs.reduce((a, b) => a + b, 0) / xs.length) * 10) / 10 : 0);

export async function capacityCase(ctx: CapacityContext): Promise<CapacityRow> {
  const fake = await new FakeOpenAiServer().start();
  fake.latencyMs(LATENCY_MS);
  // Jobs the earlier cases left due would be claimed first and counted nowhere.
  await ctx.pool.query('UPDATE jobs SET next_attempt_at = NULL WHERE next_attempt_at IS NOT NULL');
  const env = { CATALOG_FILE: capacityCatalog(fake.url), BENCH_FAKE_OPENAI_KEY: 'sk-bench' };
  const services: Service[] = [];
  try {
    const api = await ctx.startService('api', env);
    services.push(api);
    const prefix = `cap-${ctx.run}`;
    // The backlog exists before the workers start: the case measures the cap shared by three workers, not the
    // create path (the pipeline cases measure that), which would share the two cores with them meanwhile.
    const createStarted = Date.now();
    await createJobs(api.url, ctx.headers, { prefix, count: JOBS, senders: 32, provider: PROVIDER, text: 'capped' });
    const createdPerSecond = Math.round((JOBS / ((Date.now() - createStarted) / 1000)) * 10) / 10;
    services.push(...(await Promise.all(Array.from({ length: WORKERS }, () => ctx.startService('worker', env)))));
    let runningPeak = 0;
    const steady: Array<{ leases: number; atProvider: number }> = [];
    const deadline = Date.now() + JOBS * 100 + 120_000;
    const sampler = (async () => {
      for (;;) {
        if (Date.now() > deadline) {
          throw new Error(`the capacity backlog did not settle in time (fake peak ${fake.maxInFlight})`);
        }
        const { n } = (
          await ctx.pool.query(`SELECT count(*)::int AS n FROM attempts WHERE status = 'running' AND provider = $1`, [
            PROVIDER,
          ])
        ).rows[0];
        runningPeak = Math.max(runningPeak, n);
        const settled = (
          await ctx.pool.query(
            `SELECT count(*)::int AS n FROM jobs WHERE idempotency_key LIKE $1 AND status = 'succeeded'`,
            [`${prefix}-%`],
          )
        ).rows[0].n;
        if (settled < JOBS - 2 * MAX_CONCURRENCY) {
          // Steady state: where a slot's time goes (held by a lease vs. a request actually at the provider).
          const { held } = (
            await ctx.pool.query(
              `SELECT count(*)::int AS held FROM provider_leases WHERE provider = $1 AND expires_at > now()`,
              [PROVIDER],
            )
          ).rows[0];
          steady.push({ leases: held, atProvider: fake.inFlight });
        }
        if (settled >= JOBS) return;
        await sleep(200);
      }
    })();
    await sampler;
    const rows: Array<{ created: Date; started: Date; completed: Date; claimed: Date; finished: Date; id: string }> = (
      await ctx.pool.query(
        `SELECT j.created_at AS created, a.started_at AS started, j.completed_at AS completed, a.claimed_at AS claimed, a.finished_at AS finished, a.id
           FROM jobs j JOIN attempts a ON a.job_id = j.id AND a.number = 1 WHERE j.idempotency_key LIKE $1`,
        [`${prefix}-%`],
      )
    ).rows;
    const calls = new Map(fake.requests.map((r) => [String(r.headers['idempotency-key']), r]));
    const joined = rows.flatMap((r) => {
      const call = calls.get(r.id);
      return call?.answeredAt ? [{ row: r, call: { at: call.at, answeredAt: call.answeredAt } }] : [];
    });
    const first = Math.min(...rows.map((r) => r.claimed.getTime()));
    const last = Math.max(...rows.map((r) => r.completed.getTime()));
    return {
      provider: PROVIDER,
      maxConcurrency: MAX_CONCURRENCY,
      workers: WORKERS,
      latencyMs: LATENCY_MS,
      jobs: rows.length,
      settledPerSecond: Math.round((rows.length / ((last - first) / 1000)) * 10) / 10,
      target: MAX_CONCURRENCY / (LATENCY_MS / 1000),
      createdPerSecond,
      fakePeak: fake.maxInFlight,
      runningPeak,
      steadyMeanLeases: mean(steady.map((x) => x.leases)),
      steadyMeanAtProvider: mean(steady.map((x) => x.atProvider)),
      createdToStartedMs: percentiles(rows.map((r) => r.started.getTime() - r.created.getTime())),
      createdToSettledMs: percentiles(rows.map((r) => r.completed.getTime() - r.created.getTime())),
      claimedToFinishedMs: percentiles(rows.map((r) => r.finished.getTime() - r.claimed.getTime())),
      claimToArrivalMs: percentiles(joined.map(({ row, call }) => call.at - row.claimed.getTime())),
      answerToFinishedMs: percentiles(joined.map(({ row, call }) => row.finished.getTime() - call.answeredAt)),
    };
  } finally {
    await Promise.all(services.map((s) => s.stop()));
    await fake.stop();
  }
}

export function capacityTable(row: CapacityRow): string {
  return [
    '| provider | maxConcurrency | worker processes | latency ms | jobs | created/s (before the workers) | settled/s (first claim → last settled) | target | % of target | fake peak concurrent | running peak (DB) | steady mean: leases held / at the provider | created→started p50/p99 ms | created→settled p50/p99 ms | attempt claimed→finished p50/p99 ms | of which claim→request p50/p99 | answer→finished p50/p99 |',
    '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
    `| ${row.provider} | ${row.maxConcurrency} | ${row.workers} | ${row.latencyMs} | ${row.jobs} | ${row.createdPerSecond} | ${row.settledPerSecond} | ${row.target} | ${Math.round((row.settledPerSecond / row.target) * 100)}% | ${row.fakePeak} | ${row.runningPeak} | ${row.steadyMeanLeases} / ${row.steadyMeanAtProvider} | ${row.createdToStartedMs.p50} / ${row.createdToStartedMs.p99} | ${row.createdToSettledMs.p50} / ${row.createdToSettledMs.p99} | ${row.claimedToFinishedMs.p50} / ${row.claimedToFinishedMs.p99} | ${row.claimToArrivalMs.p50} / ${row.claimToArrivalMs.p99} | ${row.answerToFinishedMs.p50} / ${row.answerToFinishedMs.p99} |`,
  ].join('\n');
}
