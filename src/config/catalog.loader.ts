import { readFileSync } from 'node:fs';

import { Ajv, type ErrorObject } from 'ajv';
import { parse as parseYaml } from 'yaml';

import type { Catalog } from './catalog.types.js';

export class CatalogError extends Error {
  constructor(
    readonly field: string,
    problem: string,
  ) {
    super(`Invalid catalog: ${field} ${problem}`);
    this.name = 'CatalogError';
  }
}

const name = { type: 'string', pattern: '^[a-z0-9][a-z0-9._-]{0,62}$' };

/** An operation's answer size limit by default (1 MiB), and the most a catalog may allow (64 MiB: one jsonb value). */
export const DEFAULT_MAX_RESPONSE_BYTES = 1_048_576;
export const MAX_RESPONSE_BYTES = 67_108_864;

const catalogSchema = {
  type: 'object',
  required: ['providers', 'operations'],
  additionalProperties: false,
  properties: {
    providers: {
      type: 'array',
      minItems: 1,
      items: {
        type: 'object',
        required: ['name', 'kind', 'model', 'timeoutMs'],
        additionalProperties: false,
        properties: {
          name,
          kind: { enum: ['simulated', 'openai', 'anthropic'] },
          model: { type: 'string', minLength: 1 },
          baseUrl: { type: 'string', pattern: '^https?://' },
          apiKeyEnv: { type: 'string', pattern: '^[A-Z_][A-Z0-9_]*$' },
          timeoutMs: { type: 'integer', minimum: 1, maximum: 3_600_000 },
          hardTimeoutMs: { type: 'integer', minimum: 1, maximum: 36_000_000 },
          onTimeout: { enum: ['hold', 'failover'], default: 'hold' },
          sideEffectFree: { type: 'boolean', default: false },
          maxAttempts: { type: 'integer', minimum: 1, maximum: 20, default: 1 },
          contextWindow: { type: 'integer', minimum: 1, default: 8192 },
          api: { enum: ['chat', 'responses'] },
          pollIntervalMs: { type: 'integer', minimum: 20, maximum: 60_000 },
          store: { type: 'boolean' },
          recertify: {
            type: 'object',
            required: ['everyHours'],
            additionalProperties: false,
            // Fractions of an hour are allowed (a test's schedule); a year at most.
            properties: { everyHours: { type: 'number', exclusiveMinimum: 0, maximum: 8760 } },
          },
          pricing: {
            type: 'object',
            required: ['inputPerMTok', 'outputPerMTok', 'currency'],
            additionalProperties: false,
            properties: {
              inputPerMTok: { type: 'number', minimum: 0, maximum: 1_000_000 },
              outputPerMTok: { type: 'number', minimum: 0, maximum: 1_000_000 },
              currency: { type: 'string', pattern: '^[A-Z]{3}$' },
            },
          },
          maxConcurrency: { type: 'integer', minimum: 1, maximum: 100_000 },
          requestsPerMinute: { type: 'integer', minimum: 1, maximum: 10_000_000 },
          tokensPerMinute: { type: 'integer', minimum: 1, maximum: 10_000_000_000 },
          maxDeferrals: { type: 'integer', minimum: 0, maximum: 100, default: 3 },
          breaker: {
            type: 'object',
            required: ['failures', 'windowMs', 'cooldownMs'],
            additionalProperties: false,
            properties: {
              failures: { type: 'integer', minimum: 1, maximum: 10_000 },
              windowMs: { type: 'integer', minimum: 1, maximum: 86_400_000 },
              cooldownMs: { type: 'integer', minimum: 1, maximum: 86_400_000 },
            },
          },
          simulate: {
            type: 'object',
            additionalProperties: false,
            properties: {
              latencyMs: { type: 'integer', minimum: 0, default: 0 },
              retryAfterMs: { type: 'integer', minimum: 0, maximum: 3_600_000 },
              outcome: { enum: ['success', 'error', 'timeout', 'malformed', 'invalid', 'reset'], default: 'success' },
              errorStatus: { type: 'integer', minimum: 400, maximum: 599, default: 500 },
              responseBytes: { type: 'integer', minimum: 1, maximum: MAX_RESPONSE_BYTES },
            },
          },
        },
      },
    },
    operations: {
      type: 'array',
      minItems: 1,
      items: {
        type: 'object',
        required: ['name', 'prompt', 'inputSchema', 'outputSchema', 'providers'],
        additionalProperties: false,
        properties: {
          name,
          temperature: { type: 'number', minimum: 0, maximum: 2, default: 0 },
          maxTokens: { type: 'integer', minimum: 1, maximum: 1_000_000, default: 512 },
          maxResponseBytes: {
            type: 'integer',
            minimum: 1024,
            maximum: MAX_RESPONSE_BYTES,
            default: DEFAULT_MAX_RESPONSE_BYTES,
          },
          prompt: {
            type: 'object',
            required: ['user'],
            additionalProperties: false,
            properties: { system: { type: 'string' }, user: { type: 'string', minLength: 1 } },
          },
          inputSchema: { type: 'object' },
          outputSchema: { type: 'object' },
          providers: { type: 'array', minItems: 1, uniqueItems: true, items: { type: 'string' } },
          goldenCases: {
            type: 'array',
            default: [],
            items: {
              type: 'object',
              required: ['input'],
              additionalProperties: false,
              properties: { input: { type: 'object' } },
            },
          },
        },
      },
    },
  },
} as const;

/** `/providers/1/timeoutMs` -> `providers[1].timeoutMs` */
export function fieldPath(pointer: string): string {
  return pointer
    .split('/')
    .slice(1)
    .map((part) => part.replace(/~1/g, '/').replace(/~0/g, '~'))
    .reduce((path, part) => (/^\d+$/.test(part) ? `${path}[${part}]` : path ? `${path}.${part}` : part), '');
}

function describe(error: ErrorObject): CatalogError {
  const base = fieldPath(error.instancePath) || '(root)';
  switch (error.keyword) {
    case 'required':
      return new CatalogError(
        base === '(root)' ? error.params.missingProperty : `${base}.${error.params.missingProperty}`,
        'is required',
      );
    case 'additionalProperties':
      return new CatalogError(
        base === '(root)' ? error.params.additionalProperty : `${base}.${error.params.additionalProperty}`,
        'is not a known field',
      );
    default:
      return new CatalogError(base, error.message ?? 'is invalid');
  }
}

const validateShape = new Ajv({ allErrors: false, useDefaults: true, strict: false }).compile(catalogSchema);

/** Validates a parsed catalog in place (filling defaults) and checks the rules a schema cannot express. */
export function validateCatalog(raw: unknown): Catalog {
  if (!validateShape(raw)) throw describe(validateShape.errors![0]);
  const catalog = raw as unknown as Catalog;
  const schemaChecker = new Ajv({ strict: false, allErrors: true });

  const providerNames = new Set<string>();
  catalog.providers.forEach((provider, i) => {
    const at = `providers[${i}]`;
    if (providerNames.has(provider.name)) throw new CatalogError(`${at}.name`, 'repeats the name of another provider');
    providerNames.add(provider.name);
    provider.hardTimeoutMs ??= provider.timeoutMs * 10;
    if (provider.hardTimeoutMs < provider.timeoutMs) {
      throw new CatalogError(`${at}.hardTimeoutMs`, 'must not be less than timeoutMs');
    }
    if (provider.onTimeout === 'failover' && !provider.sideEffectFree) {
      throw new CatalogError(`${at}.onTimeout`, 'may be failover only when sideEffectFree is true');
    }
    if (provider.api !== undefined && provider.kind !== 'openai') {
      throw new CatalogError(`${at}.api`, 'is allowed only for kind openai');
    }
    if (provider.pollIntervalMs !== undefined && provider.api !== 'responses') {
      throw new CatalogError(`${at}.pollIntervalMs`, 'is allowed only with api responses');
    }
    if (provider.kind === 'openai') provider.api ??= 'chat';
    if (provider.store !== undefined && provider.api !== 'chat') {
      throw new CatalogError(`${at}.store`, 'is allowed only for kind openai with api chat');
    }
    if (provider.api === 'responses') provider.pollIntervalMs ??= 500;
    if (provider.kind === 'simulated') {
      provider.simulate = { latencyMs: 0, outcome: 'success', errorStatus: 500, ...provider.simulate };
    } else {
      if (provider.simulate) throw new CatalogError(`${at}.simulate`, 'is allowed only for kind simulated');
      if (!provider.apiKeyEnv) throw new CatalogError(`${at}.apiKeyEnv`, `is required for kind ${provider.kind}`);
    }
  });

  const operationNames = new Set<string>();
  catalog.operations.forEach((operation, i) => {
    const at = `operations[${i}]`;
    if (operationNames.has(operation.name)) {
      throw new CatalogError(`${at}.name`, 'repeats the name of another operation');
    }
    operationNames.add(operation.name);
    operation.providers.forEach((provider, j) => {
      if (!providerNames.has(provider)) {
        throw new CatalogError(`${at}.providers[${j}]`, 'names no provider of the catalog');
      }
    });
    for (const key of ['inputSchema', 'outputSchema'] as const) {
      try {
        schemaChecker.compile(operation[key]);
      } catch (error) {
        throw new CatalogError(`${at}.${key}`, `is not a valid JSON Schema (${(error as Error).message})`);
      }
    }
    const validateInput = schemaChecker.compile(operation.inputSchema);
    operation.goldenCases.forEach((golden, j) => {
      if (!validateInput(golden.input)) {
        throw new CatalogError(`${at}.goldenCases[${j}].input`, 'does not satisfy the operation input schema');
      }
    });
  });
  return catalog;
}

export function loadCatalog(file: string): Catalog {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch {
    throw new CatalogError('CATALOG_FILE', 'names a file that cannot be read');
  }
  let raw: unknown;
  try {
    raw = parseYaml(text);
  } catch (error) {
    throw new CatalogError('(file)', `is not valid YAML: ${(error as Error).message.split('\n')[0]}`);
  }
  return validateCatalog(raw);
}
