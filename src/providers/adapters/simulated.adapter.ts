import { sha256Hex } from '../../common/canonical-json.js';
import type { JsonSchema, ProviderSpec, SimulateSpec } from '../../config/catalog.types.js';
import {
  definitiveHttpError,
  type LookupResult,
  type ProviderAdapter,
  ProviderError,
  type ProviderRequest,
  type ProviderResponse,
  type RenderedPrompt,
  type RequestRef,
  responseTooLargeError,
} from '../provider.port.js';
import { estimateTokens } from '../tokens.js';

/** A deterministic value satisfying `schema`, derived from `seed` (enough of JSON Schema for catalogs). */
export function sampleFromSchema(schema: JsonSchema, seed: string): unknown {
  if ('const' in schema) return schema.const;
  if (Array.isArray(schema.enum)) return schema.enum[0];
  const type = Array.isArray(schema.type) ? schema.type[0] : schema.type;
  switch (type) {
    case 'object': {
      const properties = (schema.properties ?? {}) as Record<string, JsonSchema>;
      const required = (schema.required ?? []) as string[];
      return Object.fromEntries(
        required.map((key) => [key, sampleFromSchema(properties[key] ?? {}, `${seed}/${key}`)]),
      );
    }
    case 'array': {
      const count = Number(schema.minItems ?? 0);
      return Array.from({ length: count }, (_, i) =>
        sampleFromSchema((schema.items ?? {}) as JsonSchema, `${seed}/${i}`),
      );
    }
    case 'integer':
    case 'number':
      return Number(schema.minimum ?? 0);
    case 'boolean':
      return true;
    case 'null':
      return null;
    default: {
      const text = `simulated ${sha256Hex(seed).slice(0, 12)}: ${seed.slice(0, 80)}`;
      const min = Number(schema.minLength ?? 0);
      const max = Number(schema.maxLength ?? Infinity);
      return text.padEnd(min, '.').slice(0, max);
    }
  }
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    signal.addEventListener('abort', onAbort, { once: true });
  });
}

const REMEMBERED = 10_000;

/** Pads the first string of a sampled answer (or the answer, when a string) so its JSON is about `bytes` long. */
function padded(value: unknown, bytes: number): unknown {
  const missing = Math.max(0, bytes - JSON.stringify(value).length);
  if (typeof value === 'string') return value + '.'.repeat(missing);
  if (value && typeof value === 'object' && !Array.isArray(value)) {
    const record = value as Record<string, unknown>;
    const key = Object.keys(record).find((k) => typeof record[k] === 'string');
    if (key !== undefined) return { ...record, [key]: (record[key] as string) + '.'.repeat(missing) };
  }
  return value;
}

/** In-process provider driven by the catalog's `simulate` block: for the demo, the tests and the benchmark. */
export class SimulatedAdapter implements ProviderAdapter {
  readonly capabilities = { jsonSchema: true, cancel: false, lookup: true };
  private readonly finished = new Map<string, LookupResult>();
  private readonly simulate: SimulateSpec;

  constructor(private readonly spec: ProviderSpec) {
    this.simulate = spec.simulate!;
  }

  countPromptTokens(prompt: RenderedPrompt): number {
    return estimateTokens(prompt);
  }

  async invoke(request: ProviderRequest): Promise<ProviderResponse> {
    const requestId = `sim-${this.spec.name}-${request.idempotencyKey}`;
    const promptTokens = estimateTokens(request.prompt);
    const { latencyMs, outcome, errorStatus } = this.simulate;
    try {
      if (outcome === 'timeout') await sleep(2_147_483_647, request.signal);
      else if (latencyMs > 0) await sleep(latencyMs, request.signal);
    } catch {
      throw new ProviderError('ambiguous', 'timeout', `${this.spec.name} gave no answer before the hard timeout`);
    }
    if (outcome === 'error') {
      const { retryAfterMs } = this.simulate;
      const headers = retryAfterMs === undefined ? undefined : { 'retry-after-ms': String(retryAfterMs) };
      const error = definitiveHttpError(errorStatus, `${this.spec.name} answered ${errorStatus}`, headers);
      this.remember(request.idempotencyKey, { state: 'failed', error });
      throw error;
    }
    if (outcome === 'reset') {
      throw new ProviderError(
        'ambiguous',
        'connection_lost',
        `${this.spec.name} reset the connection after the request was sent`,
      );
    }
    const text =
      outcome === 'malformed'
        ? '{"this is": not json'
        : outcome === 'invalid'
          ? JSON.stringify({ unexpected: 'a top-level key the contract does not have' })
          : JSON.stringify(this.sample(request));
    if (Buffer.byteLength(text) > request.maxResponseBytes) {
      const error = responseTooLargeError(request.maxResponseBytes);
      this.remember(request.idempotencyKey, { state: 'failed', error });
      throw error;
    }
    const response = { text, usage: { promptTokens, completionTokens: Math.ceil(text.length / 4) }, requestId };
    this.remember(request.idempotencyKey, { state: 'succeeded', response });
    return response;
  }

  private sample(request: ProviderRequest): unknown {
    const value = sampleFromSchema(request.outputSchema, `${this.spec.model}: ${request.prompt.user}`);
    return this.simulate.responseBytes === undefined ? value : padded(value, this.simulate.responseBytes);
  }

  /**
   * By the idempotency key the attempt was sent with (its id), which is all the reconciler holds for an unknown
   * attempt.
   */
  async lookup(ref: RequestRef): Promise<LookupResult> {
    return this.finished.get(ref.attemptId) ?? { state: 'unknown' };
  }

  private remember(idempotencyKey: string, result: LookupResult): void {
    if (this.finished.size >= REMEMBERED) this.finished.delete(this.finished.keys().next().value!);
    this.finished.set(idempotencyKey, result);
  }
}
