export type ProviderKind = 'simulated' | 'openai' | 'anthropic';
export type TimeoutPolicy = 'hold' | 'failover';
/** The OpenAI API an `openai` provider is called through: Chat Completions, or Responses in background mode. */
export type OpenAiApi = 'chat' | 'responses';
export type SimulatedOutcome = 'success' | 'error' | 'timeout' | 'malformed' | 'invalid' | 'reset';

export interface SimulateSpec {
  latencyMs: number;
  outcome: SimulatedOutcome;
  /** HTTP-like status for outcome `error`: 429 and 5xx are retryable. */
  errorStatus: number;
  /** The Retry-After a simulated 429 (or 503) answer carries, in ms; none when absent. */
  retryAfterMs?: number;
  /** A successful answer padded to about this many bytes (the size limit's tests and demos). */
  responseBytes?: number;
}

/** Opens a provider's circuit after `failures` counted failures within `windowMs`, for `cooldownMs`. */
export interface BreakerSpec {
  failures: number;
  windowMs: number;
  cooldownMs: number;
}

export interface ProviderSpec {
  name: string;
  kind: ProviderKind;
  model: string;
  baseUrl?: string;
  apiKeyEnv?: string;
  timeoutMs: number;
  hardTimeoutMs: number;
  onTimeout: TimeoutPolicy;
  sideEffectFree: boolean;
  maxAttempts: number;
  contextWindow: number;
  simulate?: SimulateSpec;
  /** openai only: `responses` creates each call in background mode and follows it by id (docs/catalog.md). */
  api?: OpenAiApi;
  /**
   * `api: chat` on OpenAI itself: calls are stored with the attempt id as metadata, and found by it
   * (docs/catalog.md).
   */
  store?: boolean;
  /** `api: responses`: the worker's retrieve period while it follows a response, until the soft deadline. */
  pollIntervalMs?: number;
  /** Re-run the golden cases of every operation the provider holds a report for, this often (docs/catalog.md). */
  recertify?: { everyHours: number };
  /** Price per million tokens; attempts on a provider without it have no cost. */
  pricing?: PricingSpec;
  /** Calls in flight to this provider across all replicas (docs/design.md#capacity). */
  maxConcurrency?: number;
  requestsPerMinute?: number;
  /** Counted as the rendered prompt's tokens plus the operation's maxTokens, per call. */
  tokensPerMinute?: number;
  breaker?: BreakerSpec;
  /** Rate-limit answers a job accepts from this provider before it moves to its next certified provider. */
  maxDeferrals: number;
}

export interface PricingSpec {
  inputPerMTok: number;
  outputPerMTok: number;
  /** ISO 4217, upper case. */
  currency: string;
}

export type JsonSchema = Record<string, unknown>;

export interface OperationSpec {
  name: string;
  temperature: number;
  maxTokens: number;
  /** The largest answer a provider may send (the HTTP body, or a simulated text); past it the attempt fails. */
  maxResponseBytes: number;
  prompt: { system?: string; user: string };
  inputSchema: JsonSchema;
  outputSchema: JsonSchema;
  providers: string[];
  goldenCases: Array<{ input: Record<string, unknown> }>;
}

export interface Catalog {
  providers: ProviderSpec[];
  operations: OperationSpec[];
}

/**
 * Slack on a provider lease past the call's hard timeout: claim-to-call time, clock skew between the worker and
 * PostgreSQL. Read by the claim's grant (capacity.rules.ts leaseTtlMs) and by the running mark, which renews the
 * lease to the call's hard deadline plus this (src/ledger/attempts.repository.ts MARK_RUNNING).
 */
export const LEASE_SLACK_MS = 5_000;
