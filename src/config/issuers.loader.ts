import { readFileSync } from 'node:fs';

import { Ajv, type ErrorObject } from 'ajv';
import { parse as parseYaml } from 'yaml';

import { fieldPath } from './catalog.loader.js';
import { type IssuersConfig, JWT_ALGORITHMS } from './issuers.types.js';

export class IssuersError extends Error {
  constructor(
    readonly field: string,
    problem: string,
  ) {
    super(`Invalid AUTH_ISSUERS_FILE: ${field} ${problem}`);
    this.name = 'IssuersError';
  }
}

const url = { type: 'string', pattern: '^https?://[^\\s]+$' };
/** A claim's path: `sub`, `realm_access.roles`, `kubernetes.io.serviceaccount.name` (docs/operations.md). */
const claimPath = { type: 'string', pattern: '^[^\\s{}]{1,200}$' };
const scopeList = { type: 'array', minItems: 1, uniqueItems: true, items: { type: 'string' } };

const issuersSchema = {
  type: 'object',
  required: ['issuers'],
  additionalProperties: false,
  properties: {
    issuers: {
      type: 'array',
      minItems: 1,
      items: {
        type: 'object',
        required: ['issuer', 'audience', 'owner', 'scopes'],
        additionalProperties: false,
        properties: {
          issuer: url,
          jwksUri: url,
          audience: {
            oneOf: [
              { type: 'string', minLength: 1 },
              { type: 'array', minItems: 1, items: { type: 'string', minLength: 1 } },
            ],
          },
          algorithms: { type: 'array', minItems: 1, uniqueItems: true, items: { type: 'string' } },
          clockToleranceSec: { type: 'integer', minimum: 0, maximum: 300, default: 5 },
          jwksCacheMaxAgeSec: { type: 'integer', minimum: 1, maximum: 86_400, default: 600 },
          jwksCooldownSec: { type: 'integer', minimum: 0, maximum: 3_600, default: 30 },
          jwksTimeoutMs: { type: 'integer', minimum: 50, maximum: 30_000, default: 3_000 },
          owner: {
            type: 'object',
            additionalProperties: false,
            properties: { claim: claimPath, template: { type: 'string', pattern: '\\{\\{[^{}]+\\}\\}' } },
          },
          scopes: {
            type: 'object',
            additionalProperties: false,
            properties: {
              claim: claimPath,
              map: { type: 'object', additionalProperties: scopeList },
              static: scopeList,
            },
          },
          console: {
            type: 'object',
            required: ['clientId'],
            additionalProperties: false,
            properties: {
              clientId: { type: 'string', minLength: 1, maxLength: 200 },
              scope: { type: 'string', pattern: '(^|\\s)openid(\\s|$)', default: 'openid' },
            },
          },
        },
      },
    },
  },
} as const;

function describe(error: ErrorObject): IssuersError {
  const base = fieldPath(error.instancePath) || '(root)';
  const at = (name: string) => (base === '(root)' ? name : `${base}.${name}`);
  switch (error.keyword) {
    case 'required':
      return new IssuersError(at(error.params.missingProperty), 'is required');
    case 'additionalProperties':
      return new IssuersError(at(error.params.additionalProperty), 'is not a known field');
    case 'pattern':
      return new IssuersError(base, /template$/.test(base) ? 'must name a claim in {{double braces}}' : 'is malformed');
    default:
      return new IssuersError(base, error.message ?? 'is invalid');
  }
}

const validateShape = new Ajv({ allErrors: false, useDefaults: true, strict: false }).compile(issuersSchema);

/**
 * Validates a parsed issuers file in place (filling defaults) and checks what the schema cannot say: one way to
 * map the owner and the scopes each, known scopes only, asymmetric algorithms only, one console sign-in at most.
 */
export function validateIssuers(raw: unknown, knownScopes: readonly string[]): IssuersConfig {
  if (!validateShape(raw)) throw describe(validateShape.errors![0]);
  const config = raw as unknown as IssuersConfig;
  const seen = new Set<string>();
  let consoles = 0;
  config.issuers.forEach((issuer, i) => {
    const at = `issuers[${i}]`;
    if (seen.has(issuer.issuer)) throw new IssuersError(`${at}.issuer`, 'repeats another issuer');
    seen.add(issuer.issuer);
    const algorithms = (issuer.algorithms as string[] | undefined) ?? [...JWT_ALGORITHMS];
    algorithms.forEach((alg, j) => {
      if (!(JWT_ALGORITHMS as readonly string[]).includes(alg)) {
        throw new IssuersError(
          `${at}.algorithms[${j}]`,
          `must be one of ${JWT_ALGORITHMS.join(', ')} (asymmetric only: HMAC and none are refused)`,
        );
      }
    });
    issuer.algorithms = algorithms as IssuersConfig['issuers'][number]['algorithms'];
    const owner = issuer.owner as { claim?: string; template?: string };
    if ((owner.claim === undefined) === (owner.template === undefined)) {
      throw new IssuersError(`${at}.owner`, 'must have exactly one of claim or template');
    }
    const scopes = issuer.scopes as { claim?: string; map?: Record<string, string[]>; static?: string[] };
    if ((scopes.claim === undefined) === (scopes.static === undefined)) {
      throw new IssuersError(`${at}.scopes`, 'must have exactly one of claim or static');
    }
    if (scopes.map !== undefined && scopes.claim === undefined) {
      throw new IssuersError(`${at}.scopes.map`, 'is allowed only with scopes.claim');
    }
    const checkScopes = (list: string[], where: string) =>
      list.forEach((scope, j) => {
        if (!knownScopes.includes(scope)) {
          throw new IssuersError(`${where}[${j}]`, `must be one of ${knownScopes.join(', ')}`);
        }
      });
    if (scopes.static) checkScopes(scopes.static, `${at}.scopes.static`);
    for (const [value, list] of Object.entries(scopes.map ?? {})) checkScopes(list, `${at}.scopes.map.${value}`);
    if (issuer.console && ++consoles > 1) {
      throw new IssuersError(`${at}.console`, 'is set on another issuer already (the console signs in with one)');
    }
  });
  return config;
}

/** The issuers of AUTH_ISSUERS_FILE; none when it is unset (API keys only). */
export function loadIssuers(file: string | undefined, knownScopes: readonly string[]): IssuersConfig {
  if (file === undefined) return { issuers: [] };
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch {
    throw new IssuersError('AUTH_ISSUERS_FILE', 'names a file that cannot be read');
  }
  let raw: unknown;
  try {
    raw = parseYaml(text);
  } catch (error) {
    throw new IssuersError('(file)', `is not valid YAML: ${(error as Error).message.split('\n')[0]}`);
  }
  return validateIssuers(raw, knownScopes);
}
