/**
 * `resolution`: unknown attempts resolved at the provider (docs/design.md#resolution-at-the-provider). A provider
 * on OpenAI's Responses API in background mode (the fake, through the official SDK) whose answers come at 3 s, past
 * a 1 s timeout, for 200 jobs with `onTimeout: hold` (each unknown resolved by looking its response id up), then
 * 200 with `onTimeout: failover` (each primary cancelled at the provider, the certified fallback wins). One service
 * process (`ROLE=all`), `RECONCILE_INTERVAL_MS=500`, the jobs created at 50 a second.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import pg from 'pg';
import { parse, stringify } from 'yaml';

import { FakeOpenAiServer } from './fake-openai.server.js';
import { createJobs, percentiles, sleep } from './load.js';

export interface ResolutionRow {
  policy: 'hold' | 'failover';
  jobs: number;
  timeoutMs: number;
  answerMs: number;
  reconcileMs: number;
  succeeded: number;
  /** Jobs held for an operator: the create call never returned an id (`unknowable`), or the provider forgot it. */
  leftToOperator: number;
  /** Jobs whose one settlement is the expected attempt (hold: the primary by look-up; failover: the fallback). */
  expectedWinner: number;
  /** hold: the look-up's settlement after the fake's answer was ready (the bound: one reconcile period). */
  resolveAfterAnswerMs: { p50: number; p99: number; max: number };
  createdToSettledMs: { p50: number; p99: number };
  /** Retrieves of one response after its attempt's deadline (the reconciler's look-ups), mean and max. */
  retrievesPerUnknown: { mean: number; max: number };
  /** The closest two look-ups of one response came (the bound: 0.9 of a period). */
  minLookupGapMs: number | null;
  retrievesAfterSettled: number;
  cancels: number;
  resolvedBy: Record<string, number>;
}

interface Service {
  url: string;
  stop: () => Promise<void>;
}

export interface ResolutionContext {
  pool: pg.Pool;
  run: string;
  headers: Record<string, string>;
  databaseUrl: string;
  startService: (extraEnv: Record<string, string>) => Promise<Service>;
}

const JOBS = 200;
const TIMEOUT_MS = 1000;
const ANSWER_MS = 3000;
const RECONCILE_MS = 500;
/**
 * Creates per second: 200 jobs over 4 s, so their deadlines come at 50 a second rather than in one instant (on a
 * shared two-core machine, 200 deadlines in the same 100 ms are a burst of 600 transactions).
 */
const RATE = 50;

function resolutionCatalog(fakeUrl: string): string {
  const catalog = parse(readFileSync('bench/catalog.bench.yaml', 'utf8')) as { providers: unknown[] };
  const base = {
    kind: 'openai',
    api: 'responses',
    model: 'gpt-4o-mini',
    baseUrl: fakeUrl,
    apiKeyEnv: 'BENCH_FAKE_OPENAI_KEY',
    timeoutMs: TIMEOUT_MS,
    hardTimeoutMs: 5000,
    pollIntervalMs: 1000,
  };
  catalog.providers.push({ name: 'bench-bg-hold', ...base });
  catalog.providers.push({ name: 'bench-bg-failover', ...base, onTimeout: 'failover', sideEffectFree: true });
  const file = join(mkdtempSync(join(tmpdir(), 'onejob-bench-resolution-')), 'catalog.yaml');
  writeFileSync(file, stringify(catalog));
  return file;
}

export async function resolutionCase(ctx: ResolutionContext): Promise<ResolutionRow[]> {
  const fake = await new FakeOpenAiServer().start();
  await ctx.pool.query('UPDATE jobs SET next_attempt_at = NULL WHERE next_attempt_at IS NOT NULL');
  const env = {
    CATALOG_FILE: resolutionCatalog(fake.url),
    BENCH_FAKE_OPENAI_KEY: 'sk-bench',
    RECONCILE_INTERVAL_MS: String(RECONCILE_MS),
    WORKER_CONCURRENCY: '256',
    DB_POOL_SIZE: '40',
  };
  const service = await ctx.startService(env);
  try {
    // failover needs a certified fallback (I6): certify bench-zero for the operation, with an admin key.
    const admin = spawnSync(
      process.execPath,
      ['dist/src/auth/apikey.cli.js', 'create', '--owner', 'bench-admin', '--scopes', 'providers:certify'],
      {
        env: { PATH: process.env.PATH ?? '', DATABASE_URL: ctx.databaseUrl },
        encoding: 'utf8',
      },
    )
      .stdout.trim()
      .split('\n')
      .pop()!;
    const certified = await fetch(`${service.url}/v1/providers/bench-zero/certifications`, {
      method: 'POST',
      headers: { authorization: `Bearer ${admin}`, 'content-type': 'application/json' },
      body: JSON.stringify({ operation: 'summarize' }),
    });
    if (certified.status !== 201) throw new Error(`certification answered ${certified.status}`);
    const rows: ResolutionRow[] = [];
    for (const policy of ['hold', 'failover'] as const) {
      fake.reset();
      fake.alwaysBackground({ afterMs: ANSWER_MS });
      const prefix = `res-${policy}-${ctx.run}`;
      const primary = policy === 'hold' ? 'bench-bg-hold' : 'bench-bg-failover';
      await createJobs(service.url, ctx.headers, {
        prefix,
        count: JOBS,
        senders: 8,
        rate: RATE,
        provider: primary,
        providers: policy === 'hold' ? [primary] : [primary, 'bench-zero'],
        text: policy,
      });
      const until = Date.now() + 120_000;
      // Done when every job is terminal or waits for an operator (its create call never returned an id, on a
      // loaded machine: unknowable; or the provider forgot it: expired): the one ambiguity left, counted below.
      let leftToOperator = 0;
      for (;;) {
        const { n, waiting } = (
          await ctx.pool.query(
            `SELECT count(*) FILTER (WHERE j.status IN ('succeeded', 'failed', 'cancelled'))::int AS n,
                    count(*) FILTER (WHERE j.status = 'unknown' AND EXISTS (SELECT 1 FROM attempts a WHERE a.job_id = j.id
                      AND a.status = 'unknown' AND a.provider_status IN ('unknowable', 'expired')))::int AS waiting
               FROM jobs j WHERE j.idempotency_key LIKE $1`,
            [`${prefix}-%`],
          )
        ).rows[0];
        leftToOperator = waiting;
        if (n + waiting >= JOBS) break;
        if (Date.now() > until) {
          throw new Error(`resolution ${policy}: ${n} of ${JOBS} jobs settled in time, ${waiting} left to an operator`);
        }
        await sleep(200);
      }
      const settledRetrieves = fake.counters.retrieves;
      await sleep(RECONCILE_MS * 3);
      const attempts: Array<{
        id: string;
        job_status: string;
        winner: boolean;
        number: number;
        deadline: Date;
        finished: Date | null;
        created: Date;
        completed: Date;
        resolved_by: string | null;
      }> = (
        await ctx.pool.query(
          `SELECT a.id, j.status AS job_status, j.completed_by = a.id AS winner, a.number, a.deadline_at AS deadline, a.finished_at AS finished,
                  j.created_at AS created, j.completed_at AS completed, a.resolved_by
             FROM jobs j JOIN attempts a ON a.job_id = j.id WHERE j.idempotency_key LIKE $1`,
          [`${prefix}-%`],
        )
      ).rows;
      const firsts = attempts.filter((a) => a.number === 1);
      const lookups = firsts.map((a) =>
        (fake.responseOf(a.id)?.retrieves ?? []).filter((at) => at >= a.deadline.getTime()),
      );
      const gaps = lookups.flatMap((times) => times.slice(1).map((at, i) => at - times[i]));
      // (An attempt that never reached the fake, e.g. not sent before its deadline on a loaded machine, has no response.)
      const resolveAfter = firsts.flatMap((a) => {
        const stored = fake.responseOf(a.id);
        return a.finished && stored ? [a.finished.getTime() - (stored.createdAt + ANSWER_MS)] : [];
      });
      const expected =
        policy === 'hold' ? firsts.filter((a) => a.winner) : attempts.filter((a) => a.number === 2 && a.winner);
      const resolvedBy: Record<string, number> = {};
      for (const a of firsts) if (a.resolved_by) resolvedBy[a.resolved_by] = (resolvedBy[a.resolved_by] ?? 0) + 1;
      const sorted = [...resolveAfter].sort((a, b) => a - b);
      rows.push({
        policy,
        jobs: firsts.length,
        timeoutMs: TIMEOUT_MS,
        answerMs: ANSWER_MS,
        reconcileMs: RECONCILE_MS,
        succeeded: firsts.filter((a) => a.job_status === 'succeeded').length,
        leftToOperator,
        expectedWinner: expected.length,
        resolveAfterAnswerMs: { ...percentiles(resolveAfter), max: Math.round(sorted.at(-1) ?? 0) },
        createdToSettledMs: percentiles(firsts.map((a) => a.completed.getTime() - a.created.getTime())),
        retrievesPerUnknown: {
          mean: Math.round((lookups.reduce((n, l) => n + l.length, 0) / Math.max(1, lookups.length)) * 100) / 100,
          max: Math.max(0, ...lookups.map((l) => l.length)),
        },
        minLookupGapMs: gaps.length ? Math.min(...gaps) : null,
        retrievesAfterSettled: fake.counters.retrieves - settledRetrieves,
        cancels: fake.counters.cancels,
        resolvedBy,
      });
    }
    return rows;
  } finally {
    await service.stop();
    await fake.stop();
  }
}

export function resolutionTable(rows: ResolutionRow[]): string {
  return [
    '| onTimeout | jobs | succeeded | left to an operator | expected winner | answer→settled (look-up) p50/p99/max ms | created→settled p50/p99 ms | look-ups per unknown mean/max | closest two look-ups ms | retrieves after settled | cancels | resolved by |',
    '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|',
    ...rows.map(
      (r) =>
        `| ${r.policy} | ${r.jobs} | ${r.succeeded} | ${r.leftToOperator} | ${r.expectedWinner} | ${r.policy === 'hold' ? `${r.resolveAfterAnswerMs.p50} / ${r.resolveAfterAnswerMs.p99} / ${r.resolveAfterAnswerMs.max}` : 'n/a'} | ${r.createdToSettledMs.p50} / ${r.createdToSettledMs.p99} | ${r.retrievesPerUnknown.mean} / ${r.retrievesPerUnknown.max} | ${r.minLookupGapMs ?? 'n/a'} | ${r.retrievesAfterSettled} | ${r.cancels} | ${Object.entries(
          r.resolvedBy,
        )
          .map(([k, v]) => `${k} ${v}`)
          .join(', ')} |`,
    ),
  ].join('\n');
}
