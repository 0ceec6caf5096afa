import type { FieldError } from '../common/domain.errors.js';
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
  const errors = catalog.outputErrors(operation, value);
  return errors.length ? { ok: false, errors } : { ok: true, value };
}
