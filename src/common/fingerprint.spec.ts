import { canonicalJson } from './canonical-json.js';
import { fingerprintOf } from './fingerprint.js';

describe('canonicalJson', () => {
  it('sorts keys at every depth and drops insignificant whitespace', () => {
    expect(canonicalJson({ b: 1, a: { d: [3, { z: 1, y: 2 }], c: null } })).toBe(
      '{"a":{"c":null,"d":[3,{"y":2,"z":1}]},"b":1}',
    );
  });

  it('sorts by UTF-16 code units as RFC 8785 does', () => {
    expect(canonicalJson({ '€': 1, '\u0080': 2, a: 3, B: 4 })).toBe('{"B":4,"a":3,"\u0080":2,"€":1}');
  });

  it('writes numbers as ECMAScript does and refuses non-finite ones', () => {
    expect(canonicalJson([1.0, 1e21, -0, 0.1])).toBe('[1,1e+21,0,0.1]');
    expect(() => canonicalJson(Number.NaN)).toThrow(TypeError);
  });
});

describe('fingerprintOf', () => {
  const base = { operation: 'summarize', input: { text: 'a', lang: 'en' }, providers: ['p1', 'p2'] };

  it('ignores key order in the input', () => {
    expect(fingerprintOf(base)).toBe(
      fingerprintOf({ providers: ['p1', 'p2'], input: { lang: 'en', text: 'a' }, operation: 'summarize' }),
    );
  });

  it('changes when the operation, the input or the provider order changes', () => {
    const fp = fingerprintOf(base);
    expect(fingerprintOf({ ...base, operation: 'classify' })).not.toBe(fp);
    expect(fingerprintOf({ ...base, input: { text: 'b', lang: 'en' } })).not.toBe(fp);
    expect(fingerprintOf({ ...base, providers: ['p2', 'p1'] })).not.toBe(fp);
  });

  it('records an omitted chain as null, not as the default chain', () => {
    expect(fingerprintOf({ operation: 'summarize', input: {} })).toBe(
      fingerprintOf({ operation: 'summarize', input: {}, providers: null }),
    );
    expect(fingerprintOf({ operation: 'summarize', input: {} })).not.toBe(
      fingerprintOf({ operation: 'summarize', input: {}, providers: ['p1'] }),
    );
  });

  it('is a SHA-256 hex digest', () => {
    expect(fingerprintOf(base)).toMatch(/^[0-9a-f]{64}$/);
  });
});
