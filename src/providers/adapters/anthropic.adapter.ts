import Anthropic from '@anthropic-ai/sdk';

import { deadline } from '../../common/deadline.js';
import type { ProviderSpec } from '../../config/catalog.types.js';
import {
  classifySdkError,
  logProviderFailure,
  type ProviderAdapter,
  type ProviderRequest,
  type ProviderResponse,
  type RenderedPrompt,
} from '../provider.port.js';
import type { ProviderHttp } from '../provider-http.js';
import { estimateTokens } from '../tokens.js';

/**
 * Anthropic's Messages API through the official SDK, retries off. The system prompt is a parameter, not a
 * message; the output schema goes in `output_config.format`. The current Messages API (SDK 1.x) takes no
 * `temperature`, so the operation's temperature cannot be forwarded: docs/catalog.md says so.
 */
export class AnthropicAdapter implements ProviderAdapter {
  readonly capabilities = { jsonSchema: true, cancel: false, lookup: false };
  private readonly client: Anthropic;

  constructor(
    private readonly spec: ProviderSpec,
    apiKey: string,
    private readonly http: ProviderHttp,
  ) {
    // undici's fetch over the provider's own pool: names resolved by HostLookup, each call watched (provider-http.ts).
    this.client = new Anthropic({
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
    return estimateTokens(prompt);
  }

  async invoke(request: ProviderRequest): Promise<ProviderResponse> {
    // Our own hard deadline as well as the SDK's: the abort is what tells a timeout from a lost connection. It is
    // the only bound on the body once the headers are in (the SDK clears its timeout then), so it is a timer of
    // ours that a collection cannot take (src/common/deadline.ts).
    const hard = deadline(this.spec.hardTimeoutMs, request.signal);
    const signal = hard.signal;
    const call = this.http.call(request.maxResponseBytes);
    try {
      const message = await this.client.messages.create(
        {
          model: this.spec.model,
          max_tokens: request.maxTokens,
          output_config: { format: { type: 'json_schema', schema: request.outputSchema } },
          ...(request.prompt.system !== undefined ? { system: request.prompt.system } : {}),
          messages: [{ role: 'user', content: request.prompt.user }],
        },
        { signal, headers: { 'Idempotency-Key': request.idempotencyKey }, fetchOptions: call.fetchOptions },
      );
      const text = message.content
        .map((block) => (block.type === 'text' ? block.text : ''))
        .join('')
        .trim();
      return {
        text,
        usage: { promptTokens: message.usage?.input_tokens ?? 0, completionTokens: message.usage?.output_tokens ?? 0 },
        requestId: message.id ?? null,
      };
    } catch (error) {
      const failure = classifySdkError(Anthropic, error, signal.aborted, call);
      logProviderFailure(this.spec.name, request.idempotencyKey, failure);
      throw failure;
    } finally {
      hard.clear();
    }
  }
}
