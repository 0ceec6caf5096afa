import { Logger } from '@nestjs/common';

import { sanitizeMessage } from '../common/log-safe.js';
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
  /** The operation's `maxResponseBytes`: a larger answer is cut off and fails `response_too_large`. */
  maxResponseBytes: number;
  /** The attempt id: sent to providers that deduplicate by key. */
  idempotencyKey: string;
  /** Aborts the call: the worker fires it at the provider's hardTimeoutMs, never at the soft deadline. */
  signal: AbortSignal;
  /**
   * The attempt's soft deadline. An adapter that follows a request the provider keeps by id (OpenAI's Responses
   * in background mode) stops following it here: the attempt is `unknown`, and the reconciler looks it up.
   */
  followUntil?: Date;
  /**
   * Called once the provider gave the request its id, before its outcome: the id is committed on the attempt (and
   * in job_events) before the adapter waits. `cancel` means the attempt was given up meanwhile (failover): the
   * adapter stops, and the reconciler cancels the request at the provider
   * (docs/design.md#resolution-at-the-provider). Absent (a certification's golden case), nobody keeps the id: an
   * adapter that stops following a request still running at the provider cancels it there.
   */
  onSubmitted?: (providerRequestId: string) => Promise<'follow' | 'cancel'>;
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

/**
 * A failed call. `message` is a fixed sentence per class, safe to store and show to the job's owner; `raw`
 * is what the provider or the network said (an echoed API key, an internal host name), for the log only.
 */
export class ProviderError extends Error {
  constructor(
    readonly kind: FailureKind,
    readonly reason: string,
    message: string,
    readonly retryable = false,
    readonly status?: number,
    readonly raw?: string,
    /** For `rate_limited`: how long the provider asked us to wait, from its headers; undefined when it did not say. */
    readonly retryAfterMs?: number,
  ) {
    super(message);
    this.name = 'ProviderError';
  }
}

/** The reason of a rate-limit answer: retryable, not counted against maxAttempts, and pauses the provider. */
export const RATE_LIMITED = 'rate_limited';

/**
 * The reason of an answer past the operation's `maxResponseBytes`: definitive and not retryable (the same prompt
 * at the same provider answers alike), so the job moves to its next certified provider or fails; the provider
 * answered, so its breaker does not count it.
 */
export const RESPONSE_TOO_LARGE = 'response_too_large';

export function responseTooLargeError(limit: number, raw?: string): ProviderError {
  const message = `the answer was larger than the operation allows (${limit} bytes)`;
  return new ProviderError('definitive', RESPONSE_TOO_LARGE, message, false, undefined, raw);
}

type HeaderBag = Headers | Record<string, string | string[] | undefined> | undefined;

function header(headers: HeaderBag, name: string): string | undefined {
  if (!headers) return undefined;
  if (typeof (headers as Headers).get === 'function') return (headers as Headers).get(name) ?? undefined;
  const value = (headers as Record<string, string | string[] | undefined>)[name];
  return Array.isArray(value) ? value[0] : value;
}

/** OpenAI's reset durations: "1s", "6m0s", "20ms", "1h2m3.5s". */
function parseResetDuration(text: string): number | undefined {
  const parts = [...text.matchAll(/(\d+(?:\.\d+)?)(ms|h|m|s)/g)];
  if (!parts.length || parts.map((p) => p[0]).join('') !== text.trim()) return undefined;
  const unit = { h: 3_600_000, m: 60_000, s: 1000, ms: 1 } as const;
  return Math.ceil(parts.reduce((ms, [, n, u]) => ms + Number(n) * unit[u as keyof typeof unit], 0));
}

/**
 * How long a rate-limit answer asks us to wait: the longest of `retry-after-ms`, `Retry-After` (seconds or an
 * HTTP date) and OpenAI's `x-ratelimit-reset-requests` / `-tokens`; undefined when none is readable. Capped at an
 * hour, so a hostile or broken header cannot park a provider for ever.
 */
export function retryAfterFromHeaders(headers: HeaderBag, now = Date.now()): number | undefined {
  const candidates: number[] = [];
  const ms = Number(header(headers, 'retry-after-ms'));
  if (header(headers, 'retry-after-ms') !== undefined && Number.isFinite(ms) && ms >= 0) candidates.push(ms);
  const after = header(headers, 'retry-after')?.trim();
  if (after) {
    if (/^\d+(\.\d+)?$/.test(after)) candidates.push(Number(after) * 1000);
    else if (!Number.isNaN(Date.parse(after))) candidates.push(Math.max(0, Date.parse(after) - now));
  }
  for (const name of ['x-ratelimit-reset-requests', 'x-ratelimit-reset-tokens']) {
    const value = header(headers, name);
    const parsed = value === undefined ? undefined : parseResetDuration(value);
    if (parsed !== undefined) candidates.push(parsed);
  }
  return candidates.length ? Math.min(3_600_000, Math.ceil(Math.max(...candidates))) : undefined;
}

const HTTP_MESSAGES: Record<number, string> = {
  400: 'the provider refused the request as invalid',
  401: 'the provider refused the credentials',
  403: 'the provider refused access to the model or endpoint',
  404: 'the provider does not know the model or endpoint',
  408: 'the provider timed the request out',
  409: 'the provider reported a conflict',
  413: 'the request was too large for the provider',
  422: 'the provider could not process the request',
  429: 'the provider is limiting the request rate',
};

/** The stored message of an HTTP error answer: fixed per status class, whatever the provider's body said. */
export function httpErrorMessage(status: number): string {
  return (
    HTTP_MESSAGES[status] ??
    (status >= 500 ? 'the provider had a server error' : `the provider answered HTTP ${status}`)
  );
}

/**
 * An HTTP error answer. 429, and 503 with a Retry-After, are the provider limiting us (RATE_LIMITED): the job did
 * nothing wrong (docs/design.md#capacity). Other 408 and 5xx answers are retryable; the rest of 4xx are not.
 */
export function definitiveHttpError(status: number, raw?: string, headers?: HeaderBag): ProviderError {
  const retryAfterMs = retryAfterFromHeaders(headers);
  if (status === 429 || (status === 503 && retryAfterMs !== undefined)) {
    return new ProviderError('definitive', RATE_LIMITED, httpErrorMessage(429), true, status, raw, retryAfterMs);
  }
  return new ProviderError(
    'definitive',
    `http_${status}`,
    httpErrorMessage(status),
    status === 408 || status >= 500,
    status,
    raw,
  );
}

const providerLog = new Logger('ProviderError');

/** The one place a provider's own words are written down: in the log, with anything like a key redacted. */
export function logProviderFailure(provider: string, attemptId: string, error: ProviderError): void {
  providerLog.warn({
    msg: 'provider call failed',
    provider,
    attemptId,
    kind: error.kind,
    reason: error.reason,
    status: error.status,
    raw: error.raw === undefined ? undefined : sanitizeMessage(error.raw, 500),
  });
}

/**
 * What the provider's record says of a request. `pending`: still queued or running there (`providerStatus`).
 * `unknown`: the adapter holds nothing to ask by. `expired`: the provider no longer knows the id (past its
 * retention): an operator decides. `unknowable`: the create call never returned an id, so nobody can ask.
 */
export type LookupResult =
  | { state: 'pending'; providerStatus?: string }
  | { state: 'unknown' }
  | { state: 'expired'; reason: string }
  | { state: 'unknowable'; reason: string }
  | { state: 'succeeded'; response: ProviderResponse }
  | { state: 'failed'; error: ProviderError; providerStatus?: string };

/** What an adapter is given to find a request again: the attempt id it was sent with, and the provider's id. */
export interface RequestRef {
  attemptId: string;
  providerRequestId: string | null;
  /** The operation's `maxResponseBytes`, where the caller knows it. */
  maxResponseBytes?: number;
}

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
  /** Cancels the request at the provider; returns what the provider then says of it, where it says. */
  cancel?(ref: RequestRef): Promise<LookupResult | undefined>;
  /** What became of the request: by the provider's id where it gave one, by the attempt id otherwise. */
  lookup?(ref: RequestRef): Promise<LookupResult>;
  /** Closes the adapter's connections, once no call is in flight any more. */
  close?(): Promise<void>;
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
  const raw = error instanceof Error ? error.message : String(error);
  if (aborted) {
    return new ProviderError('ambiguous', 'timeout', 'no answer before the hard timeout', false, undefined, raw);
  }
  const code = networkCode(error);
  if (code && NOT_SENT.has(code)) {
    return new ProviderError(
      'definitive',
      'connection_refused',
      `the provider could not be reached (${code})`,
      true,
      undefined,
      raw,
    );
  }
  if (/timed? ?out/i.test(raw)) {
    return new ProviderError('ambiguous', 'timeout', 'no answer before the timeout', false, undefined, raw);
  }
  const suffix = code ? ` (${code})` : '';
  return new ProviderError(
    'ambiguous',
    'connection_lost',
    `the connection failed after the request was sent${suffix}`,
    false,
    undefined,
    raw,
  );
}

/** The error classes the OpenAI and Anthropic SDKs both export (both are generated by the same toolchain). */
export interface SdkErrorClasses {
  APIConnectionTimeoutError: abstract new (...args: never[]) => Error;
  APIUserAbortError: abstract new (...args: never[]) => Error;
  APIConnectionError: abstract new (...args: never[]) => Error;
  APIError: abstract new (...args: never[]) => Error & { status?: number; headers?: Headers };
}

/** What the HTTP layer saw of one call (`ProviderCall` in provider-http.ts). */
export interface CallTrace {
  /** The request reached a connected socket: until then nothing was sent. */
  sent: boolean;
  /** The answer passed `maxResponseBytes` and was cut off. */
  tooLarge: boolean;
  maxResponseBytes: number;
}

/**
 * A call that failed before its request reached a socket (the name did not resolve in time, the connection was
 * refused or never completed, or the deadline came first): nothing was sent, so it is definitive and retryable,
 * like a refused connection, and never `unknown` (I4).
 */
export function notConnectedError(error: unknown, aborted: boolean): ProviderError {
  const raw = error instanceof Error ? error.message : String(error);
  const code = networkCode(error);
  const why = code ? ` (${code})` : aborted ? ' before the hard timeout' : '';
  const message = `the provider could not be reached${why}`;
  return new ProviderError('definitive', 'connection_refused', message, true, undefined, raw);
}

/**
 * Classifies an official SDK's error: HTTP answers are definitive, transport failures by whether they were sent
 * (the call's trace when the adapter has one, the error's code otherwise).
 */
export function classifySdkError(
  sdk: SdkErrorClasses,
  error: unknown,
  aborted: boolean,
  trace?: CallTrace,
): ProviderError {
  // An error answer is its status, even when its body was cut off at the size limit (the SDK reads it for a
  // message).
  if (error instanceof sdk.APIError && typeof error.status === 'number') {
    return definitiveHttpError(error.status, error.message, error.headers);
  }
  if (trace?.tooLarge) {
    return responseTooLargeError(trace.maxResponseBytes, error instanceof Error ? error.message : undefined);
  }
  if (trace && !trace.sent) return notConnectedError(error, aborted);
  if (error instanceof sdk.APIConnectionTimeoutError) {
    return new ProviderError(
      'ambiguous',
      'timeout',
      'no answer before the hard timeout',
      false,
      undefined,
      error.message,
    );
  }
  if (error instanceof sdk.APIUserAbortError) return classifyTransportError(error, true);
  if (error instanceof sdk.APIConnectionError) return classifyTransportError(error, aborted);
  if (error instanceof sdk.APIError && typeof error.status === 'number') {
    return definitiveHttpError(error.status, error.message, error.headers);
  }
  return classifyTransportError(error, aborted);
}
