import { canonicalJson, sha256Hex } from '../common/canonical-json.js';
import { fingerprintOf } from '../common/fingerprint.js';
import { batchFingerprint } from './batch-fingerprint.js';
import { type BatchCatalog, batchErrorCode, validateBatch } from './batch-validation.js';

const catalog: BatchCatalog = {
  hasOperation: (name) => name === 'summarize',
  hasProvider: (name) => name === 'p1' || name === 'p2',
  inputErrors: (_operation, input) =>
    typeof (input as { text?: unknown }).text === 'string' ? [] : [{ field: 'input.text', message: 'is required' }],
};
const item = (key: string, text = key) => ({ key, operation: 'summarize', input: { text } });

describe('validateBatch', () => {
  it('accepts a valid batch with omitted providers as null and priority 0', () => {
    const body = { items: [item('a'), { ...item('b'), providers: ['p2', 'p1'] }] };
    const { command, errors } = validateBatch(body, catalog);
    expect(errors).toEqual([]);
    expect(command).toEqual({
      items: [
        { key: 'a', operation: 'summarize', input: { text: 'a' }, providers: null },
        { key: 'b', operation: 'summarize', input: { text: 'b' }, providers: ['p2', 'p1'] },
      ],
      metadata: null,
      priority: 0,
    });
  });

  it('names the index and field of every bad item, and refuses a key repeated within the batch', () => {
    const { command, errors } = validateBatch(
      {
        items: [
          item('a'),
          { key: 'a', operation: 'summarize', input: {} },
          { key: '', operation: 'x', input: [] },
          'nope',
        ],
        priority: 1.5,
        other: true,
      },
      catalog,
    );
    expect(command).toBeUndefined();
    expect(errors.map((e) => e.field)).toEqual([
      'other',
      'priority',
      'items[1].input.text',
      'items[1].key',
      'items[2].key',
      'items[2].operation',
      'items[2].input',
      'items[3]',
    ]);
    expect(errors.find((e) => e.field === 'items[1].key')?.message).toMatch(/items\[0\]/);
  });

  it('refuses the 10,001st item by its index, and members that are Object.prototype names', () => {
    const many = Array.from({ length: 10_001 }, (_, i) => item(`k${i}`));
    expect(validateBatch({ items: many }, catalog).errors).toEqual([
      { field: 'items[10000]', message: expect.stringMatching(/10000/), code: 'validation_failed' },
    ]);
    const tricky = JSON.parse('{"items":[{"key":"a","operation":"summarize","input":{"text":"a"},"constructor":1}]}');
    expect(validateBatch(tricky, catalog).errors).toEqual([
      { field: 'items[0].constructor', message: 'is not a known field', code: 'validation_failed' },
    ]);
  });

  it('codes an unknown operation and provider as a single create does, and the batch by the code they share', () => {
    const op = validateBatch({ items: [item('a'), { key: 'b', operation: 'x', input: {} }] }, catalog).errors;
    expect(op).toEqual([{ field: 'items[1].operation', message: expect.any(String), code: 'unknown_operation' }]);
    expect(batchErrorCode(op)).toBe('unknown_operation');
    const chain = { key: 'c', operation: 'summarize', input: { text: 'c' }, providers: ['p1', 'p9'] };
    const provider = validateBatch({ items: [chain] }, catalog).errors;
    expect(provider).toEqual([
      { field: 'items[0].providers[1]', message: expect.any(String), code: 'unknown_provider' },
    ]);
    expect(batchErrorCode(provider)).toBe('unknown_provider');
    expect(batchErrorCode([...op, ...provider])).toBe('validation_failed');
  });
});

describe('batchFingerprint', () => {
  const command = (items: Array<ReturnType<typeof item>>, metadata: Record<string, unknown> | null = null) => ({
    items: items.map((i) => ({ ...i, providers: null })),
    metadata,
    priority: 0,
  });
  const fp = (c: ReturnType<typeof command>) =>
    batchFingerprint(
      c,
      c.items.map((i) => fingerprintOf(i)),
    );

  it('is the SHA-256 of the canonical JSON of the keys and fingerprints in order, and the metadata', () => {
    const c = command([item('a'), item('b')], { z: 1, a: [2] });
    const pairs = c.items.map((i) => [i.key, fingerprintOf(i)]);
    const expected = sha256Hex(canonicalJson({ items: pairs, metadata: c.metadata }));
    expect(fp(c)).toBe(expected);
  });

  it('changes with the order of the items, an item, or the metadata, and not with the metadata key order', () => {
    const base = fp(command([item('a'), item('b')], { x: 1, y: 2 }));
    expect(fp(command([item('b'), item('a')], { x: 1, y: 2 }))).not.toBe(base);
    expect(fp(command([item('a'), item('b', 'other')], { x: 1, y: 2 }))).not.toBe(base);
    expect(fp(command([item('a'), item('b')], null))).not.toBe(base);
    expect(fp(command([item('a'), item('b')], { y: 2, x: 1 }))).toBe(base);
  });
});
