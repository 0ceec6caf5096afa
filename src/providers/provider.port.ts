import type { JsonSchema } from '../config/catalog.types.js';

/** A prompt rendered from an operation's template and a job's input; adapters shape it into their API's messages. */
export interface RenderedPrompt {
  system?: string;
  user: string;
}

export interface ProviderRequest {
  prompt: RenderedPrompt;
  operation: string;
  outputSchema: JsonSchema;
  temperature: number;
  maxTokens: number;
  /** The attempt id: sent to providers that deduplicate by key. */
  idempotencyKey: string;
  /** Aborts the call: the worker fires it at the provider's hardTimeoutMs, never at the soft deadline. */
  signal: AbortSignal;
}

export interface ProviderUsage {
  promptTokens: number;
  completionTokens: number;
}

export interface ProviderResponse {
  /** The raw text the model returned; the output contract is checked by the caller, not the adapter. */
  text: string;
  usage: ProviderUsage;
  requestId: string | null;
}

/**
 * definitive: the provider answered with an error, or the request never reached it (refused connection).
 * ambiguous: the request may have been processed (timeout, reset after send): the attempt is `unknown`.
 */
export type FailureKind = 'definitive' | 'ambiguous';

export class ProviderError extends Error {
  constructor(
    readonly kind: FailureKind,
    readonly reason: string,
    message: string,
    readonly retryable = false,
    readonly status?: number,
  ) {
    super(message);
    this.name = 'ProviderError';
  }
}

export const definitiveHttpError = (status: number, message: string) =>
  new ProviderError('definitive', `http_${status}`, message, status === 408 || status === 429 || status >= 500, status);

export type LookupResult = { state: 'pending' } | { state: 'unknown' } | { state: 'succeeded'; response: ProviderResponse } | { state: 'failed'; error: ProviderError };

export interface ProviderCapabilities {
  /** The endpoint can constrain output to a JSON schema. */
  jsonSchema: boolean;
  cancel: boolean;
  lookup: boolean;
}

/** The one interface every adapter implements. */
export interface ProviderAdapter {
  readonly capabilities: ProviderCapabilities;
  invoke(request: ProviderRequest): Promise<ProviderResponse>;
  /** Prompt tokens with the provider's tokenizer where a package has it, an estimate otherwise. */
  countPromptTokens(prompt: RenderedPrompt): number;
  cancel?(requestId: string): Promise<void>;
  lookup?(requestId: string): Promise<LookupResult>;
}

/** Walks an error's cause chain for a network error code. */
export function networkCode(error: unknown): string | undefined {
  let current: unknown = error;
  for (let depth = 0; depth < 6 && current && typeof current === 'object'; depth++) {
    const code = (current as { code?: unknown }).code;
    if (typeof code === 'string' && /^E[A-Z_]+$/.test(code)) return code;
    const nested = (current as { errors?: unknown[] }).errors;
    if (Array.isArray(nested) && nested.length) current = nested[0];
    else current = (current as { cause?: unknown }).cause;
  }
  return undefined;
}

/** Errors raised before a byte reached the provider are definitive (and worth a retry); the rest are ambiguous. */
const NOT_SENT = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EHOSTUNREACH', 'ENETUNREACH', 'EAI_AGAIN']);

export function classifyTransportError(error: unknown, aborted: boolean): ProviderError {
  if (aborted) return new ProviderError('ambiguous', 'timeout', 'no answer before the hard timeout');
  const code = networkCode(error);
  if (code && NOT_SENT.has(code)) return new ProviderError('definitive', 'connection_refused', `the provider could not be reached (${code})`, true);
  const message = error instanceof Error ? error.message : String(error);
  if (/timed? ?out/i.test(message)) return new ProviderError('ambiguous', 'timeout', message);
  return new ProviderError('ambiguous', 'connection_lost', `the connection failed after the request was sent (${code ?? message})`);
}
