import { CatalogError, validateCatalog } from './catalog.loader.js';

const catalog = (pricing: unknown) => ({
  providers: [{ name: 'p', kind: 'simulated', model: 'm', timeoutMs: 100, ...(pricing === undefined ? {} : { pricing }) }],
  operations: [{ name: 'o', prompt: { user: 'x' }, inputSchema: { type: 'object' }, outputSchema: { type: 'object' }, providers: ['p'] }],
});

describe('catalog pricing', () => {
  it('is optional, and kept when valid', () => {
    expect(validateCatalog(catalog(undefined)).providers[0].pricing).toBeUndefined();
    expect(validateCatalog(catalog({ inputPerMTok: 3, outputPerMTok: 15, currency: 'USD' })).providers[0].pricing).toEqual({ inputPerMTok: 3, outputPerMTok: 15, currency: 'USD' });
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
