import { IssuersError, validateIssuers } from './issuers.loader.js';

const SCOPES = ['jobs:write', 'jobs:read', 'ops:read'];
const base = () => ({
  issuer: 'https://idp.example/realms/acme',
  audience: 'onejob',
  owner: { claim: 'azp' },
  scopes: { claim: 'groups', map: { writers: ['jobs:write'] } },
});

function errorOf(issuer: Record<string, unknown>): string {
  try {
    validateIssuers({ issuers: [issuer] }, SCOPES);
  } catch (error) {
    expect(error).toBeInstanceOf(IssuersError);
    return (error as Error).message;
  }
  throw new Error('accepted');
}

describe('AUTH_ISSUERS_FILE', () => {
  it('fills the defaults: the three asymmetric algorithms, jose-like JWKS bounds', () => {
    const [issuer] = validateIssuers({ issuers: [base()] }, SCOPES).issuers;
    expect(issuer).toMatchObject({
      algorithms: ['RS256', 'ES256', 'EdDSA'],
      clockToleranceSec: 5,
      jwksCacheMaxAgeSec: 600,
      jwksCooldownSec: 30,
      jwksTimeoutMs: 3000,
    });
  });

  it.each([
    [{ audience: undefined }, 'issuers[0].audience is required'],
    [{ algorithms: ['HS256'] }, 'issuers[0].algorithms[0] must be one of RS256, ES256, EdDSA'],
    [{ algorithms: ['none'] }, 'issuers[0].algorithms[0] must be one of RS256, ES256, EdDSA'],
    [{ issuer: 'idp.example' }, 'issuers[0].issuer is malformed'],
    [{ owner: {} }, 'issuers[0].owner must have exactly one of claim or template'],
    [{ owner: { template: 'no braces' } }, 'issuers[0].owner.template must name a claim in {{double braces}}'],
    [
      { scopes: { static: ['jobs:write'], claim: 'groups' } },
      'issuers[0].scopes must have exactly one of claim or static',
    ],
    [
      { scopes: { claim: 'groups', map: { writers: ['jobs:delete'] } } },
      'issuers[0].scopes.map.writers[0] must be one of',
    ],
    [{ scopes: { static: ['root'] } }, 'issuers[0].scopes.static[0] must be one of'],
    [{ jwksTimeoutMs: 0 }, 'issuers[0].jwksTimeoutMs'],
    [{ colour: 'blue' }, 'issuers[0].colour is not a known field'],
    [{ console: { clientId: 'onejob-console', scope: 'profile' } }, 'issuers[0].console.scope is malformed'],
  ])('names the bad field of %p', (change, message) => {
    expect(errorOf({ ...base(), ...change })).toContain(message);
  });

  it('refuses an issuer listed twice, and two consoles', () => {
    expect(() => validateIssuers({ issuers: [base(), base()] }, SCOPES)).toThrow('issuers[1].issuer repeats another');
    const other = { ...base(), issuer: 'https://other.example', console: { clientId: 'b' } };
    expect(() => validateIssuers({ issuers: [{ ...base(), console: { clientId: 'a' } }, other] }, SCOPES)).toThrow(
      'issuers[1].console is set on another issuer already',
    );
  });
});
