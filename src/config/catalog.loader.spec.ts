import { CatalogError, validateCatalog } from './catalog.loader.js';

const catalog = (pricing: unknown) => ({
  providers: [
    { name: 'p', kind: 'simulated', model: 'm', timeoutMs: 100, ...(pricing === undefined ? {} : { pricing }) },
  ],
  operations: [
    {
      name: 'o',
      prompt: { user: 'x' },
      inputSchema: { type: 'object' },
      outputSchema: { type: 'object' },
      providers: ['p'],
    },
  ],
});

describe('catalog pricing', () => {
  it('is optional, and kept when valid', () => {
    expect(validateCatalog(catalog(undefined)).providers[0].pricing).toBeUndefined();
    expect(
      validateCatalog(catalog({ inputPerMTok: 3, outputPerMTok: 15, currency: 'USD' })).providers[0].pricing,
    ).toEqual({ inputPerMTok: 3, outputPerMTok: 15, currency: 'USD' });
  });

  it.each([
    [{ inputPerMTok: -1, outputPerMTok: 1, currency: 'USD' }],
    [{ inputPerMTok: 1, outputPerMTok: 1, currency: 'usd' }],
    [{ inputPerMTok: 1, currency: 'USD' }],
    [{ inputPerMTok: 1, outputPerMTok: 1, currency: 'USD', perRequest: 1 }],
  ])('refuses %j, naming the field', (pricing) => {
    expect(() => validateCatalog(catalog(pricing))).toThrow(CatalogError);
    expect(() => validateCatalog(catalog(pricing))).toThrow(/providers\[0\]\.pricing/);
  });
});

describe('catalog capacity fields', () => {
  const withFields = (fields: Record<string, unknown>) => {
    const c = catalog(undefined);
    Object.assign(c.providers[0], fields);
    return c;
  };

  it('are optional; maxDeferrals defaults to 3', () => {
    const [p] = validateCatalog(withFields({})).providers;
    expect(p).toMatchObject({ maxDeferrals: 3 });
    expect(p.maxConcurrency).toBeUndefined();
    const [q] = validateCatalog(
      withFields({
        maxConcurrency: 5,
        requestsPerMinute: 60,
        tokensPerMinute: 1000,
        breaker: { failures: 5, windowMs: 1000, cooldownMs: 500 },
        maxDeferrals: 0,
      }),
    ).providers;
    expect(q).toMatchObject({
      maxConcurrency: 5,
      requestsPerMinute: 60,
      tokensPerMinute: 1000,
      breaker: { failures: 5, windowMs: 1000, cooldownMs: 500 },
      maxDeferrals: 0,
    });
  });

  it.each([
    [{ maxConcurrency: 0 }, 'maxConcurrency'],
    [{ requestsPerMinute: 1.5 }, 'requestsPerMinute'],
    [{ tokensPerMinute: -1 }, 'tokensPerMinute'],
    [{ breaker: { failures: 5, windowMs: 1000 } }, 'breaker'],
    [{ breaker: { failures: 0, windowMs: 1000, cooldownMs: 1 } }, 'breaker.failures'],
    [{ maxDeferrals: 'many' }, 'maxDeferrals'],
  ])('refuses %j, naming the field', (fields, field) => {
    expect(() => validateCatalog(withFields(fields))).toThrow(
      new RegExp(`providers\\[0\\]\\.${field.replace('.', '\\.')}`),
    );
  });
});

describe('catalog maxResponseBytes', () => {
  it('defaults to 1 MiB per operation', () => {
    expect(validateCatalog(catalog(undefined)).operations[0].maxResponseBytes).toBe(1_048_576);
  });

  it.each([100, 100 * 1024 * 1024, 1.5, '1MB'])('refuses %j, naming the field', (value) => {
    const c = catalog(undefined);
    Object.assign(c.operations[0], { maxResponseBytes: value });
    expect(() => validateCatalog(c)).toThrow(/operations\[0\]\.maxResponseBytes/);
  });
});
