import { GroupCommit } from './group-commit.js';

// What SettlementBatcher's spec does not reach: the weight cap that JobsRepository's creates use.
describe('GroupCommit', () => {
  it('keeps a statement under maxWeight, yet always takes one write however heavy', async () => {
    const statements: number[][] = [];
    const group = new GroupCommit<number, number>({
      maxBatch: 64,
      maxInFlight: 1,
      keyOf: (n) => String(n),
      weightOf: (n) => n,
      maxWeight: 10,
      commit: async (writes) => {
        statements.push(writes);
        await new Promise((resolve) => setTimeout(resolve, 2));
        return writes.map((n) => n * 2);
      },
    });
    const weights = [4, 4, 4, 30, 1, 2, 3, 9];
    await expect(Promise.all(weights.map((n) => group.submit(n)))).resolves.toEqual(weights.map((n) => n * 2));
    for (const statement of statements) {
      expect(statement.length === 1 || statement.reduce((a, b) => a + b, 0) <= 10).toBe(true);
    }
    expect(statements.flat().sort((a, b) => a - b)).toEqual([...weights].sort((a, b) => a - b));
    expect(statements).toContainEqual([30]);
  });
});
