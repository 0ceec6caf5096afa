import type { ErrorCode, FieldError } from '../common/domain.errors.js';
import { MAX_IDEMPOTENCY_KEY_LENGTH } from '../jobs/request-headers.js';

/** Items one batch may carry (docs/api.md#batches). */
export const MAX_BATCH_ITEMS = 10_000;
export const MIN_PRIORITY = -1000;
export const MAX_PRIORITY = 1000;
/** The metadata is a label of the client's, not a store: at most this many bytes of JSON. */
export const MAX_METADATA_BYTES = 16_384;
const MAX_PROVIDERS = 10;
const VISIBLE_ASCII = /^[\x21-\x7e]+$/;
const BODY_FIELDS = new Set(['items', 'metadata', 'priority']);
const ITEM_FIELDS = new Set(['key', 'operation', 'input', 'providers']);

/** What validation needs of the catalog. */
export interface BatchCatalog {
  hasOperation(name: string): boolean;
  hasProvider(name: string): boolean;
  inputErrors(operation: string, input: unknown): FieldError[];
}

export interface BatchItemCommand {
  key: string;
  operation: string;
  input: Record<string, unknown>;
  /** As sent: null when omitted (the fingerprint records null, not the default chain). */
  providers: string[] | null;
}

export interface BatchCommand {
  items: BatchItemCommand[];
  metadata: Record<string, unknown> | null;
  priority: number;
}

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

function keyError(key: unknown): string | undefined {
  if (typeof key !== 'string') return 'must be a string';
  if (key.length === 0) return 'must not be empty';
  if (key.length > MAX_IDEMPOTENCY_KEY_LENGTH) return `must be at most ${MAX_IDEMPOTENCY_KEY_LENGTH} characters`;
  if (!VISIBLE_ASCII.test(key)) return 'must be visible ASCII characters only (0x21-0x7E)';
  return undefined;
}

function providerErrors(providers: unknown, at: string, catalog: BatchCatalog): FieldError[] {
  if (!Array.isArray(providers)) return [{ field: at, message: 'must be an array of provider names' }];
  if (providers.length < 1 || providers.length > MAX_PROVIDERS) {
    return [{ field: at, message: `must name 1 to ${MAX_PROVIDERS} providers` }];
  }
  const errors: FieldError[] = [];
  const seen = new Set<unknown>();
  providers.forEach((name, k) => {
    const field = `${at}[${k}]`;
    if (typeof name !== 'string' || name.length < 1 || name.length > 100) {
      errors.push({ field, message: 'must be a provider name of 1 to 100 characters' });
    } else if (seen.has(name)) errors.push({ field, message: 'repeats a provider of the chain' });
    else if (!catalog.hasProvider(name)) {
      errors.push({ field, message: 'is not a provider of the catalog', code: 'unknown_provider' });
    }
    seen.add(name);
  });
  return errors;
}

function itemErrors(item: unknown, at: string, catalog: BatchCatalog): FieldError[] {
  if (!isObject(item)) return [{ field: at, message: 'must be an object {key, operation, input, providers?}' }];
  const errors: FieldError[] = Object.keys(item)
    .filter((name) => !ITEM_FIELDS.has(name))
    .map((name) => ({ field: `${at}.${name}`, message: 'is not a known field' }));
  const keyWrong = keyError(item.key);
  if (keyWrong) errors.push({ field: `${at}.key`, message: keyWrong });
  const operation = item.operation;
  const known = typeof operation === 'string' && catalog.hasOperation(operation);
  if (typeof operation !== 'string' || operation.length < 1 || operation.length > 100) {
    errors.push({ field: `${at}.operation`, message: 'must be an operation name of 1 to 100 characters' });
  } else if (!known) {
    errors.push({ field: `${at}.operation`, message: 'is not an operation of the catalog', code: 'unknown_operation' });
  }
  if (!isObject(item.input)) errors.push({ field: `${at}.input`, message: 'must be an object' });
  else if (known) {
    for (const e of catalog.inputErrors(operation, item.input)) {
      errors.push({ field: `${at}.${e.field}`, message: e.message });
    }
  }
  if (item.providers !== undefined) errors.push(...providerErrors(item.providers, `${at}.providers`, catalog));
  return errors;
}

/**
 * The code of a batch refused for these errors: the one they all share (`unknown_operation` when every error is an
 * unknown operation, as a single create's), else `validation_failed`. Each error carries its own.
 */
export function batchErrorCode(errors: FieldError[]): ErrorCode {
  const codes = new Set(errors.map((e) => e.code ?? 'validation_failed'));
  return codes.size === 1 ? [...codes][0] : 'validation_failed';
}

/**
 * The whole body checked before anything is written (docs/api.md#batches): every item's shape, operation,
 * providers, input schema and key, and a key repeated within the batch. Errors name the item's index and field
 * (`items[3].input.text`) and carry a code (`unknown_operation`, `unknown_provider`, else `validation_failed`); the
 * caller reports the first of them with the count of the rest.
 */
export function validateBatch(body: unknown, catalog: BatchCatalog): { command?: BatchCommand; errors: FieldError[] } {
  const { command, errors } = checkBatch(body, catalog);
  return { command, errors: errors.map((e) => (e.code ? e : { ...e, code: 'validation_failed' })) };
}

function checkBatch(body: unknown, catalog: BatchCatalog): { command?: BatchCommand; errors: FieldError[] } {
  if (!isObject(body)) {
    return { errors: [{ field: 'body', message: 'must be an object {items, metadata?, priority?}' }] };
  }
  const errors: FieldError[] = Object.keys(body)
    .filter((name) => !BODY_FIELDS.has(name))
    .map((name) => ({ field: name, message: 'is not a known field' }));
  const { items, metadata, priority } = body;
  if (metadata !== undefined && metadata !== null) {
    if (!isObject(metadata)) errors.push({ field: 'metadata', message: 'must be an object' });
    else if (Buffer.byteLength(JSON.stringify(metadata)) > MAX_METADATA_BYTES) {
      errors.push({ field: 'metadata', message: `must be at most ${MAX_METADATA_BYTES} bytes of JSON` });
    }
  }
  const level = priority as number;
  const priorityOk = Number.isInteger(level) && level >= MIN_PRIORITY && level <= MAX_PRIORITY;
  if (priority !== undefined && !priorityOk) {
    errors.push({ field: 'priority', message: `must be an integer from ${MIN_PRIORITY} to ${MAX_PRIORITY}` });
  }
  if (!Array.isArray(items)) {
    return { errors: [...errors, { field: 'items', message: `must be an array of 1 to ${MAX_BATCH_ITEMS} items` }] };
  }
  if (items.length === 0) return { errors: [...errors, { field: 'items', message: 'must have at least one item' }] };
  if (items.length > MAX_BATCH_ITEMS) {
    const field = `items[${MAX_BATCH_ITEMS}]`;
    return { errors: [...errors, { field, message: `is past the limit of ${MAX_BATCH_ITEMS} items in a batch` }] };
  }
  const firstIndexOf = new Map<string, number>();
  items.forEach((item, i) => {
    errors.push(...itemErrors(item, `items[${i}]`, catalog));
    const key = isObject(item) && typeof item.key === 'string' ? item.key : undefined;
    if (key === undefined) return;
    const first = firstIndexOf.get(key);
    if (first === undefined) firstIndexOf.set(key, i);
    else errors.push({ field: `items[${i}].key`, message: `repeats the key of items[${first}]: one item per key` });
  });
  if (errors.length) return { errors };
  return {
    errors,
    command: {
      items: (items as Array<Record<string, unknown>>).map((item) => ({
        key: item.key as string,
        operation: item.operation as string,
        input: item.input as Record<string, unknown>,
        providers: (item.providers as string[] | undefined) ?? null,
      })),
      metadata: (metadata as Record<string, unknown> | null | undefined) ?? null,
      priority: (priority as number | undefined) ?? 0,
    },
  };
}
