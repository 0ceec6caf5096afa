import { encodingForModel, getEncoding, type Tiktoken, type TiktokenModel } from 'js-tiktoken';
import OpenAI from 'openai';

import { deadline } from '../../common/deadline.js';
import type { ProviderSpec } from '../../config/catalog.types.js';
import {
  classifySdkError,
  logProviderFailure,
  type LookupResult,
  type ProviderAdapter,
  type ProviderCapabilities,
  type ProviderRequest,
  type ProviderResponse,
  type RenderedPrompt,
  type RequestRef,
} from '../provider.port.js';
import type { ProviderHttp } from '../provider-http.js';
import { PER_MESSAGE, PER_REPLY } from '../tokens.js';

const encoders = new Map<string, Tiktoken>();

function encoderFor(model: string): Tiktoken {
  let encoder = encoders.get(model);
  if (!encoder) {
    try {
      encoder = encodingForModel(model as TiktokenModel);
    } catch {
      // Unknown to js-tiktoken (a self-hosted OpenAI-compatible model): the current OpenAI encoding.
      encoder = getEncoding('o200k_base');
    }
    encoders.set(model, encoder);
  }
  return encoder;
}

export function countOpenAiTokens(model: string, prompt: RenderedPrompt): number {
  const encoder = encoderFor(model);
  const messages = [prompt.system, prompt.user].filter((m): m is string => m !== undefined);
  return messages.reduce((n, text) => n + PER_MESSAGE + encoder.encode(text).length, PER_REPLY);
}

/**
 * Any OpenAI-compatible chat-completions endpoint, through the official SDK with its retries off: a retry is
 * an attempt, and only the service makes attempts. The SDK's own timeout is the hard timeout; the soft
 * deadline never aborts a call (docs/design.md#7-execution).
 */
export class OpenAiAdapter implements ProviderAdapter {
  readonly capabilities: ProviderCapabilities;
  private readonly client: OpenAI;

  constructor(
    private readonly spec: ProviderSpec,
    apiKey: string,
    private readonly http: ProviderHttp,
  ) {
    // `store: true`: a call whose answer never arrived is found again by its attempt id, in the stored completions.
    this.capabilities = { jsonSchema: true, cancel: false, lookup: spec.store === true };
    if (spec.store) this.lookup = (ref) => this.findStored(ref);
    // undici's fetch over the provider's own pool: names resolved by HostLookup, each call watched (provider-http.ts).
    this.client = new OpenAI({
      apiKey,
      baseURL: spec.baseUrl,
      maxRetries: 0,
      timeout: spec.hardTimeoutMs,
      fetch: http.fetch,
    });
  }

  close(): Promise<void> {
    return this.http.close();
  }

  countPromptTokens(prompt: RenderedPrompt): number {
    return countOpenAiTokens(this.spec.model, prompt);
  }

  lookup?: (ref: RequestRef) => Promise<LookupResult>;

  /**
   * The stored completion that carries the attempt id in its metadata (OpenAI keeps `store: true` completions and
   * lists them by metadata; few compatible servers do). None yet: the call may still be running, or never have
   * been made, and the attempt stays unknown.
   */
  private async findStored(ref: RequestRef): Promise<LookupResult> {
    const call = this.http.call(ref.maxResponseBytes ?? 64 * 1024 * 1024);
    const page = await this.client.chat.completions.list(
      { metadata: { onejob_attempt: ref.attemptId }, limit: 1 },
      { fetchOptions: call.fetchOptions },
    );
    const found = page.data[0];
    if (!found) return { state: 'pending', providerStatus: 'not_stored' };
    const usage = {
      promptTokens: found.usage?.prompt_tokens ?? 0,
      completionTokens: found.usage?.completion_tokens ?? 0,
    };
    return {
      state: 'succeeded',
      response: { text: found.choices[0]?.message?.content ?? '', usage, requestId: found.id },
    };
  }

  async invoke(request: ProviderRequest): Promise<ProviderResponse> {
    const messages: OpenAI.Chat.Completions.ChatCompletionMessageParam[] = [];
    if (request.prompt.system !== undefined) messages.push({ role: 'system', content: request.prompt.system });
    messages.push({ role: 'user', content: request.prompt.user });
    // Our own hard deadline as well as the SDK's: the abort is what tells a timeout from a lost connection. It is
    // the only bound on the body once the headers are in (the SDK clears its timeout then), so it is a timer of
    // ours that a collection cannot take (src/common/deadline.ts).
    const hard = deadline(this.spec.hardTimeoutMs, request.signal);
    const signal = hard.signal;
    const call = this.http.call(request.maxResponseBytes);
    try {
      const completion = await this.client.chat.completions.create(
        {
          model: this.spec.model,
          messages,
          temperature: request.temperature,
          max_tokens: request.maxTokens,
          response_format: {
            type: 'json_schema',
            json_schema: {
              name: request.operation.replace(/[^A-Za-z0-9_-]/g, '_'),
              schema: request.outputSchema,
              strict: false,
            },
          },
          ...(this.spec.store ? { store: true, metadata: { onejob_attempt: request.idempotencyKey } } : {}),
        },
        { signal, headers: { 'Idempotency-Key': request.idempotencyKey }, fetchOptions: call.fetchOptions },
      );
      return {
        text: completion.choices[0]?.message?.content ?? '',
        usage: {
          promptTokens: completion.usage?.prompt_tokens ?? 0,
          completionTokens: completion.usage?.completion_tokens ?? 0,
        },
        requestId: completion.id ?? null,
      };
    } catch (error) {
      const failure = classifySdkError(OpenAI, error, signal.aborted, call);
      logProviderFailure(this.spec.name, request.idempotencyKey, failure);
      throw failure;
    } finally {
      hard.clear();
    }
  }
}
