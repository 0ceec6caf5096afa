import { claimAt, ownerOf, scopesOf, UnmappedOwnerError } from './claims.js';

const k8s = {
  sub: 'system:serviceaccount:payments:batcher',
  aud: ['onejob'],
  'kubernetes.io': { namespace: 'payments', serviceaccount: { name: 'batcher', uid: 'b-1' }, pod: { name: 'p-7' } },
  realm_access: { roles: ['onejob-operators', 'offline_access'] },
  groups: ['onejob-writers', 'unmapped'],
  scope: 'openid jobs:read profile',
};

describe('claim paths', () => {
  it('reads a nested claim by its dotted path', () => {
    expect(claimAt(k8s, 'realm_access.roles')).toEqual(['onejob-operators', 'offline_access']);
    expect(claimAt(k8s, 'sub')).toBe('system:serviceaccount:payments:batcher');
  });

  it("reads a segment that holds dots where the token's key does (kubernetes.io)", () => {
    expect(claimAt(k8s, 'kubernetes.io.serviceaccount.name')).toBe('batcher');
    expect(claimAt(k8s, 'kubernetes.io.namespace')).toBe('payments');
  });

  it('tries the shorter key when the longer one leads nowhere, and finds nothing where nothing is', () => {
    expect(claimAt({ 'a.b': { x: 1 }, a: { b: { c: 2 } } }, 'a.b.c')).toBe(2);
    expect(claimAt(k8s, 'kubernetes.io.serviceaccount.missing')).toBeUndefined();
    expect(claimAt(k8s, 'toString')).toBeUndefined();
    expect(claimAt(k8s, 'groups.length')).toBeUndefined();
  });
});

describe('the owner a token maps to', () => {
  it('is one claim, or a template of claims', () => {
    expect(ownerOf(k8s, { claim: 'kubernetes.io.serviceaccount.name' })).toBe('batcher');
    expect(ownerOf(k8s, { template: 'k8s-{{kubernetes.io.namespace}}-{{ kubernetes.io.serviceaccount.name }}' })).toBe(
      'k8s-payments-batcher',
    );
  });

  it('is refused when a claim it names is missing, empty, not text, or the owner is over 200 characters', () => {
    expect(() => ownerOf(k8s, { claim: 'azp' })).toThrow(UnmappedOwnerError);
    expect(() => ownerOf({ azp: '' }, { claim: 'azp' })).toThrow(UnmappedOwnerError);
    expect(() => ownerOf(k8s, { template: 'x-{{groups}}' })).toThrow(UnmappedOwnerError);
    expect(() => ownerOf({ sub: 'x'.repeat(201) }, { claim: 'sub' })).toThrow(UnmappedOwnerError);
  });
});

describe('the scopes a token maps to', () => {
  it('maps groups through the table, dropping values it does not list', () => {
    const map = { 'onejob-writers': ['jobs:write', 'jobs:read'], 'onejob-operators': ['ops:read', 'jobs:read'] };
    expect(scopesOf(k8s, { claim: 'groups', map })).toEqual(['jobs:write', 'jobs:read']);
    expect(scopesOf(k8s, { claim: 'realm_access.roles', map })).toEqual(['ops:read', 'jobs:read']);
  });

  it("reads a space-separated scope claim as OAuth's, keeping only onejob's scopes without a table", () => {
    expect(scopesOf(k8s, { claim: 'scope' })).toEqual(['jobs:read']);
  });

  it('gives none for a missing claim, and the static list for every token', () => {
    expect(scopesOf(k8s, { claim: 'roles' })).toEqual([]);
    expect(scopesOf({}, { static: ['jobs:write'] })).toEqual(['jobs:write']);
  });

  it('never maps an inherited name (a group called constructor)', () => {
    expect(scopesOf({ groups: ['constructor', '__proto__'] }, { claim: 'groups', map: {} })).toEqual([]);
  });
});
