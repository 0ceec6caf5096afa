import { client, FULL, jobsWithKeyPrefix, type RaceTarget, raceTarget, RUN } from './target.js';

describe('race suite: many replicas, many duplicates', () => {
  let target: RaceTarget;
  beforeAll(async () => {
    target = await raceTarget({ replicas: 3 });
  }, 60_000);
  afterAll(() => target.close());

  const [posts, keys] = FULL ? [1000, 100] : [300, 30];

  it(`answers ${posts} concurrent POSTs on ${keys} keys across the replicas with exactly ${keys} jobs and no 5xx`, async () => {
    const owner = client(target, target.keys.owner);
    const prefix = `${RUN}-rep-`;
    const answers = await Promise.all(
      Array.from({ length: posts }, (_, i) =>
        owner.at(i).create(`${prefix}${i % keys}`, { operation: 'summarize', input: { text: `intent ${i % keys}` } }),
      ),
    );
    expect(answers.filter((a) => a.status >= 500)).toEqual([]);
    const idByKey = new Map<number, Set<string>>();
    answers.forEach((a, i) => {
      expect([200, 201]).toContain(a.status);
      const set = idByKey.get(i % keys) ?? new Set<string>();
      set.add(a.body.id);
      idByKey.set(i % keys, set);
    });
    expect([...idByKey.values()].every((ids) => ids.size === 1)).toBe(true);
    expect(new Set(answers.map((a) => a.body.id)).size).toBe(keys);
    expect(answers.filter((a) => a.status === 201)).toHaveLength(keys);

    // What the deployment holds for these keys, read back through the API (keyset pages).
    expect(await jobsWithKeyPrefix(owner, prefix)).toHaveLength(keys);
  }, 120_000);
});
