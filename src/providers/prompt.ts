import type { OperationSpec } from '../config/catalog.types.js';
import type { RenderedPrompt } from './provider.port.js';

export class PromptRenderError extends Error {
  constructor(
    readonly variable: string,
    readonly where: 'system' | 'user',
  ) {
    super(`prompt.${where} references {{${variable}}}, which the input does not have`);
    this.name = 'PromptRenderError';
  }
}

const PLACEHOLDER = /\{\{\s*([A-Za-z_][\w.]*)\s*\}\}/g;

function lookup(input: Record<string, unknown>, path: string): unknown {
  return path
    .split('.')
    .reduce<unknown>(
      (value, key) => (value && typeof value === 'object' ? (value as Record<string, unknown>)[key] : undefined),
      input,
    );
}

function fill(template: string, input: Record<string, unknown>, where: 'system' | 'user'): string {
  return template.replace(PLACEHOLDER, (_match, variable: string) => {
    const value = lookup(input, variable);
    if (value === undefined || value === null) throw new PromptRenderError(variable, where);
    return typeof value === 'string' ? value : JSON.stringify(value);
  });
}

/** Fills `{{var}}` (dotted paths allowed) from the input; a missing variable fails loudly, never renders empty. */
export function renderPrompt(operation: Pick<OperationSpec, 'prompt'>, input: Record<string, unknown>): RenderedPrompt {
  const user = fill(operation.prompt.user, input, 'user');
  return operation.prompt.system === undefined
    ? { user }
    : { system: fill(operation.prompt.system, input, 'system'), user };
}
