import type { ArrivedResultWrite, SettledResult } from './settlement.repository.js';
import { SETTLE_BATCH, SETTLE_IN_FLIGHT, SettlementBatcher } from './settlement-batcher.js';

// The grouping alone, with a scripted statement: what each result decides is the SQL's, tested on PostgreSQL in
// test/settlement.property.e2e-spec.ts.
const write = (jobId: string, attemptId: string): ArrivedResultWrite => ({
  jobId,
  attemptId,
  eligibleFrom: ['running'],
  value: { summary: attemptId },
  usage: { promptTokens: 1, completionTokens: 1 },
  providerRequestId: null,
  resultDigest: 'd',
});
const settledAs = (attemptId: string): SettledResult => ({
  version: 1,
  announced: 0,
  attemptFrom: 'running',
  attemptTo: 'succeeded',
  priorOutcome: null,
  provider: `p-${attemptId}`,
  jobFrom: 'running',
  jobVersion: 0,
  readVersion: 0,
  winner: null,
});

function scripted(fail?: (writes: ArrivedResultWrite[]) => Error | undefined) {
  const statements: string[][] = [];
  let inFlight = 0;
  let peak = 0;
  const settle = async (writes: ArrivedResultWrite[]) => {
    statements.push(writes.map((w) => w.attemptId));
    peak = Math.max(peak, ++inFlight);
    await new Promise((resolve) => setTimeout(resolve, 5));
    inFlight--;
    const error = fail?.(writes);
    if (error) throw error;
    return new Map(writes.map((w) => [w.attemptId, settledAs(w.attemptId)]));
  };
  return { statements, settle, peak: () => peak };
}

describe('SettlementBatcher', () => {
  const sharedTitle =
    'settles results that arrive together in shared statements, at most SETTLE_IN_FLIGHT at a time, ' +
    'each answered with its own row';
  it(sharedTitle, async () => {
    const s = scripted();
    const batcher = new SettlementBatcher(s.settle);
    const results = await Promise.all(
      Array.from({ length: 200 }, (_, i) => batcher.submit(write(`job-${i}`, `a-${i}`))),
    );
    expect(results.map((r) => r?.provider)).toEqual(Array.from({ length: 200 }, (_, i) => `p-a-${i}`));
    expect(s.statements.length).toBeLessThanOrEqual(Math.ceil(200 / SETTLE_BATCH) + SETTLE_IN_FLIGHT);
    expect(Math.max(...s.statements.map((b) => b.length))).toBeLessThanOrEqual(SETTLE_BATCH);
    expect(s.peak()).toBeLessThanOrEqual(SETTLE_IN_FLIGHT);
  });

  it('never puts two results of one job in one statement', async () => {
    const s = scripted();
    const batcher = new SettlementBatcher(s.settle);
    await Promise.all([
      batcher.submit(write('j', 'a1')),
      batcher.submit(write('j', 'a2')),
      batcher.submit(write('k', 'b1')),
    ]);
    for (const statement of s.statements) expect(statement.filter((id) => id.startsWith('a'))).not.toHaveLength(2);
    expect(s.statements.flat().sort()).toEqual(['a1', 'a2', 'b1']);
  });

  it('answers an attempt the statement did not find with undefined', async () => {
    const batcher = new SettlementBatcher(async () => new Map());
    await expect(batcher.submit(write('j', 'a'))).resolves.toBeUndefined();
  });

  it('settles each result of a failed batch alone, so one bad result fails only itself', async () => {
    const s = scripted((writes) =>
      writes.some((w) => w.attemptId === 'bad') ? new Error('invalid input syntax') : undefined,
    );
    const batcher = new SettlementBatcher(s.settle);
    const answers = await Promise.allSettled(
      ['a', 'bad', 'b', 'c'].map((id, i) => batcher.submit(write(`job-${i}`, id))),
    );
    expect(answers.map((a) => a.status)).toEqual(['fulfilled', 'rejected', 'fulfilled', 'fulfilled']);
  });

  const failTitle =
    'fails the whole batch at once when the database is away or the statement deadlocked (the callers retry)';
  it(failTitle, async () => {
    // A lost connection may have lost a COMMIT's answer: the whole statement runs once more (it reads back what
    // the first committed: docs/operations.md#failover), never one statement per result; a deadlock is the callers'.
    for (const [code, statements] of [
      ['ECONNREFUSED', 6],
      ['40P01', 3],
    ] as const) {
      const s = scripted(() => Object.assign(new Error('down'), { code }));
      const batcher = new SettlementBatcher(s.settle);
      const answers = await Promise.allSettled(['a', 'b', 'c'].map((id, i) => batcher.submit(write(`job-${i}`, id))));
      expect(answers.every((a) => a.status === 'rejected')).toBe(true);
      expect(s.statements.map((st) => st.length)).toEqual(statements === 6 ? [3, 3] : [3]);
    }
  });
});
