/**
 * What a drain cost the PostgreSQL server, per job: its CPU (bench/cpu.ts, the embedded server's processes), and
 * from its own counters the transactions (pg_stat_database), the rows written (inserted + updated + deleted, the
 * same view) and, when pg_stat_statements is loaded, the statements clients sent (top level, less BEGIN, COMMIT and
 * ROLLBACK, which the transactions count, and less the foreign-key checks PostgreSQL runs itself: a deferred one
 * runs at COMMIT, outside any statement, and pg_stat_statements counts it as one of the top level), all of one
 * database.
 *
 * Backends publish pg_stat_database's counts when they go idle, at most once a second: read them after a second of
 * quiet (DrainMeter.start after the jobs were seeded, DrainMeter.cost after the drain). pg_stat_statements counts
 * at once.
 */
import type pg from 'pg';

export interface ServerProbe {
  admin: pg.Client;
  /** CPU seconds of the server so far; absent when its postmaster is not the bench's own. */
  postgresCpuSeconds?: () => number;
  /** pg_stat_statements is loaded and its view readable by `admin`. */
  statements?: boolean;
}

export interface DrainCost {
  cpuMsPerJob: { process: number; postgres: number | null };
  transactionsPerJob: number;
  statementsPerJob: number | null;
  rowsWrittenPerJob: number;
  /** With pg_stat_statements: the statements that took the most of the server's time, and the frequent ones. */
  top?: TopStatement[];
}

export interface TopStatement {
  callsPerJob: number;
  meanMs: number;
  /** Of the time all statements of the database took over the drain. */
  share: number;
  query: string;
}

/** What the bench itself sent to the database during the drain (to see it was over), taken off the counts. */
export interface Observer {
  statements: number;
  transactions: number;
  rowsWritten: number;
}

interface Counts {
  transactions: number;
  rowsWritten: number;
  statements: number | null;
  /** Per statement (pg_stat_statements' queryid): its calls and time so far. */
  byStatement: Map<string, { calls: number; ms: number; query: string }>;
}

async function counts(probe: ServerProbe, database: string): Promise<Counts> {
  const { rows } = await probe.admin.query<{ transactions: string; rows_written: string }>(
    `SELECT xact_commit + xact_rollback AS transactions, tup_inserted + tup_updated + tup_deleted AS rows_written
       FROM pg_stat_database WHERE datname = $1`,
    [database],
  );
  let statements: number | null = null;
  const byStatement: Counts['byStatement'] = new Map();
  if (probe.statements) {
    const { rows: s } = await probe.admin.query<{
      id: string;
      calls: string;
      ms: number;
      query: string;
      control: boolean;
    }>(
      `SELECT s.queryid::text AS id, s.calls, s.total_exec_time AS ms, s.query,
              s.query ~* '^\\s*(begin|commit|rollback|start transaction|end)\\y'
                OR s.query ~ '^SELECT \\S+ FROM ONLY .* FOR KEY SHARE OF x$' AS control
         FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
        WHERE d.datname = $1 AND s.toplevel`,
      [database],
    );
    statements = 0;
    for (const r of s) {
      if (!r.control) statements += Number(r.calls);
      byStatement.set(r.id, { calls: Number(r.calls), ms: r.ms, query: r.query });
    }
  }
  return {
    transactions: Number(rows[0].transactions),
    rowsWritten: Number(rows[0].rows_written),
    statements,
    byStatement,
  };
}

export class DrainMeter {
  private cpuEnd?: { process: number; postgres: number | null };

  private constructor(
    private readonly probe: ServerProbe,
    private readonly database: string,
    private readonly processCpu: (() => number) | undefined,
    private readonly before: Counts,
    private readonly cpuBefore: { process: number; postgres: number | null },
  ) {}

  /** Before the drain, once the seeding's counts are published. `processCpu`: the worker's CPU seconds so far. */
  static async start(probe: ServerProbe, databaseUrl: string, processCpu?: () => number): Promise<DrainMeter> {
    const database = new URL(databaseUrl).pathname.slice(1);
    const before = await counts(probe, database);
    const cpu = { process: processCpu?.() ?? 0, postgres: probe.postgresCpuSeconds?.() ?? null };
    return new DrainMeter(probe, database, processCpu, before, cpu);
  }

  /** At the drain's last completion: the CPU read at once. */
  stopCpu(): void {
    this.cpuEnd = { process: this.processCpu?.() ?? 0, postgres: this.probe.postgresCpuSeconds?.() ?? null };
  }

  /**
   * After a second of quiet: the cost per job, less what the bench sent. `processCpuSeconds`: the worker's CPU over
   * the drain when it measured it itself (a peer), in place of the `processCpu` given to start.
   */
  async cost(jobs: number, observer: Observer, processCpuSeconds?: number): Promise<DrainCost> {
    if (!this.cpuEnd) this.stopCpu();
    const after = await counts(this.probe, this.database);
    const end = this.cpuEnd!;
    const per = (n: number, digits: number) => Math.round((n / jobs) * 10 ** digits) / 10 ** digits;
    return {
      cpuMsPerJob: {
        process: per((processCpuSeconds ?? end.process - this.cpuBefore.process) * 1000, 3),
        postgres:
          end.postgres === null || this.cpuBefore.postgres === null
            ? null
            : per((end.postgres - this.cpuBefore.postgres) * 1000, 3),
      },
      transactionsPerJob: per(after.transactions - this.before.transactions - observer.transactions, 3),
      statementsPerJob:
        after.statements === null || this.before.statements === null
          ? null
          : per(after.statements - this.before.statements - observer.statements, 3),
      rowsWrittenPerJob: per(after.rowsWritten - this.before.rowsWritten - observer.rowsWritten, 2),
      ...(after.statements === null ? {} : { top: this.top(after, jobs) }),
    };
  }

  private top(after: Counts, jobs: number): TopStatement[] {
    const deltas = [...after.byStatement].map(([id, a]) => {
      const b = this.before.byStatement.get(id);
      return { calls: a.calls - (b?.calls ?? 0), ms: a.ms - (b?.ms ?? 0), query: a.query };
    });
    const total = deltas.reduce((sum, d) => sum + d.ms, 0) || 1;
    // The six that took the most time, and any other sent for every tenth job or more.
    return deltas
      .filter((d) => d.calls > 0)
      .sort((x, y) => y.ms - x.ms)
      .filter((d, i) => i < 6 || d.calls >= jobs / 10)
      .map((d) => ({
        callsPerJob: Math.round((d.calls / jobs) * 1000) / 1000,
        meanMs: Math.round((d.ms / d.calls) * 1000) / 1000,
        share: Math.round((d.ms / total) * 1000) / 1000,
        query: d.query.replace(/\s+/g, ' ').slice(0, 90),
      }));
  }
}
