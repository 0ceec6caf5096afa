import { type FieldError, MAX_REPORTED_ERRORS } from '../common/domain.errors.js';
import { inspectJson } from '../common/json-text.js';
import type { CatalogService } from './catalog.service.js';

export type ContractCheck = { ok: true; value: unknown } | { ok: false; errors: FieldError[] };

/** Parses a provider's text as JSON and checks it against the operation's output schema. */
export function checkOutput(catalog: CatalogService, operation: string, text: string): ContractCheck {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return { ok: false, errors: [{ field: 'output', message: 'is not valid JSON' }] };
  }
  // A result PostgreSQL cannot store would fail its settlement write and be lost: it breaks the contract instead.
  const unstorable = inspectJson(value, 'output', { stopAtLimits: false }).unstorable;
  if (unstorable.length) return { ok: false, errors: unstorable.slice(0, MAX_REPORTED_ERRORS) };
  const errors = catalog.outputErrors(operation, value);
  return errors.length ? { ok: false, errors: errors.slice(0, MAX_REPORTED_ERRORS) } : { ok: true, value };
}
