import OpenAI from 'openai';

import { deadline } from '../../common/deadline.js';
import type { ProviderSpec } from '../../config/catalog.types.js';
import {
  classifySdkError,
  logProviderFailure,
  type LookupResult,
  type ProviderAdapter,
  ProviderError,
  type ProviderRequest,
  type ProviderResponse,
  type RenderedPrompt,
  type RequestRef,
} from '../provider.port.js';
import type { ProviderHttp } from '../provider-http.js';
import { countOpenAiTokens } from './openai.adapter.js';

type Response = OpenAI.Responses.Response;

/** Statuses a background response leaves only by itself (or by a cancel): keep following. */
const PENDING = new Set(['queued', 'in_progress']);

const sleep = (ms: number, signal: AbortSignal) =>
  new Promise<void>((resolve) => {
    const timer = setTimeout(done, Math.max(0, ms));
    function done() {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    }
    signal.addEventListener('abort', done, { once: true });
  });

/**
 * The text of a response's messages, read from its `output` as the API reference defines it. The SDK's
 * `output_text` is a convenience it adds to what `create` and `retrieve` return, not to a `cancel`'s answer: a
 * response that completed as the cancel came would read as empty, and its paid result as a contract violation.
 */
function outputTextOf(response: Response): string {
  const texts: string[] = [];
  for (const item of response.output ?? []) {
    if (item.type !== 'message') continue;
    for (const part of item.content) if (part.type === 'output_text') texts.push(part.text);
  }
  return texts.join('');
}

/**
 * What a response's status means for the attempt. The stored messages are fixed sentences; the provider's code
 * (an enum of its API: `server_error`, `max_output_tokens`) is safe to show, its free text goes to the log only.
 */
export function lookupOf(response: Response): LookupResult {
  const status = response.status ?? 'completed';
  if (PENDING.has(status)) return { state: 'pending', providerStatus: status };
  if (status === 'completed') {
    const usage = {
      promptTokens: response.usage?.input_tokens ?? 0,
      completionTokens: response.usage?.output_tokens ?? 0,
    };
    return { state: 'succeeded', response: { text: outputTextOf(response), usage, requestId: response.id } };
  }
  const code =
    status === 'failed'
      ? response.error?.code
      : status === 'incomplete'
        ? response.incomplete_details?.reason
        : undefined;
  const message = `the provider reported the response ${status}${code ? ` (${code})` : ''}`;
  // A server error may pass on a new attempt; an incomplete answer (a token limit, a content filter) would not.
  const retryable = status === 'failed' && (code === 'server_error' || code === undefined);
  const error = new ProviderError(
    'definitive',
    `response_${status}`,
    message,
    retryable,
    undefined,
    response.error?.message,
  );
  return { state: 'failed', error, providerStatus: status };
}

/**
 * OpenAI's Responses API in background mode (`api: responses`), through the official SDK with its retries off.
 * The create call returns the response's id at once (status `queued`); the adapter hands it to the worker, which
 * commits it on the attempt before anything else, then follows the response by retrieving it every
 * `pollIntervalMs` until it ends or the attempt's soft deadline passes. Past that the attempt is `unknown` and the
 * reconciler looks it up by id (docs/design.md#resolution-at-the-provider); a create call that never returned is
 * the one ambiguity left.
 */
export class OpenAiResponsesAdapter implements ProviderAdapter {
  readonly capabilities = { jsonSchema: true, cancel: true, lookup: true };
  private readonly client: OpenAI;

  constructor(
    private readonly spec: ProviderSpec,
    apiKey: string,
    private readonly http: ProviderHttp,
  ) {
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

  async invoke(request: ProviderRequest): Promise<ProviderResponse> {
    const hard = deadline(this.spec.hardTimeoutMs, request.signal);
    let created: Response | undefined;
    try {
      created = await this.create(request, hard.signal);
      // An id that could not be committed (the database was down until the deadline) is still followed here.
      const next = request.onSubmitted
        ? await request.onSubmitted(created.id).catch(() => 'follow' as const)
        : 'follow';
      if (next === 'cancel') {
        // Given up while the create call was out (failover): nobody waits for this response any more. Its id is
        // committed, and the reconciler cancels it at the provider and records what the cancel answers.
        throw new ProviderError('ambiguous', 'given_up', 'the attempt was given up; its response is cancelled');
      }
      return this.settled(await this.follow(created, request, hard.signal), request.idempotencyKey);
    } catch (error) {
      // Nobody keeps the id of a request without onSubmitted (a certification's case): a response still running
      // when the adapter stops following it would run on at the provider, billed, with nobody to cancel it.
      if (!request.onSubmitted && error instanceof ProviderError && error.reason === 'timeout' && created) {
        await this.cancel({ attemptId: request.idempotencyKey, providerRequestId: created.id }).catch(() => undefined);
      }
      throw error;
    } finally {
      hard.clear();
    }
  }

  /** The one call whose failure can leave a request of unknown fate: it may have been created without an answer. */
  private async create(request: ProviderRequest, signal: AbortSignal): Promise<Response> {
    const call = this.http.call(request.maxResponseBytes);
    try {
      return await this.client.responses.create(
        {
          model: this.spec.model,
          instructions: request.prompt.system,
          input: request.prompt.user,
          temperature: request.temperature,
          max_output_tokens: request.maxTokens,
          text: {
            format: {
              type: 'json_schema',
              name: request.operation.replace(/[^A-Za-z0-9_-]/g, '_'),
              schema: request.outputSchema,
              strict: false,
            },
          },
          background: true,
          store: true,
          metadata: { onejob_attempt: request.idempotencyKey },
        },
        { signal, headers: { 'Idempotency-Key': request.idempotencyKey }, fetchOptions: call.fetchOptions },
      );
    } catch (error) {
      const failure = classifySdkError(OpenAI, error, signal.aborted, call);
      logProviderFailure(this.spec.name, request.idempotencyKey, failure);
      throw failure;
    }
  }

  /**
   * Retrieves the response until it leaves queued/in_progress or the soft deadline passes. A failed retrieve
   * proves nothing about the response (it was created): the next one is tried, and at the deadline the attempt
   * is unknown, for the reconciler.
   */
  private async follow(created: Response, request: ProviderRequest, signal: AbortSignal): Promise<Response> {
    const until = request.followUntil?.getTime() ?? Date.now() + this.spec.timeoutMs;
    let current = created;
    while (PENDING.has(current.status ?? 'completed')) {
      const left = until - Date.now();
      if (left <= 0 || signal.aborted) {
        const message = `the response was still ${current.status} at the provider at the deadline`;
        throw new ProviderError('ambiguous', 'timeout', message);
      }
      await sleep(Math.min(this.spec.pollIntervalMs ?? 500, left), signal);
      if (Date.now() >= until || signal.aborted) continue;
      try {
        current = await this.retrieve(created.id, request.maxResponseBytes, signal);
      } catch (error) {
        const failure = error instanceof ProviderError ? error : classifySdkError(OpenAI, error, signal.aborted);
        logProviderFailure(this.spec.name, request.idempotencyKey, failure);
        if (failure.reason === 'response_too_large') throw failure;
      }
    }
    return current;
  }

  private settled(response: Response, attemptId: string): ProviderResponse {
    const found = lookupOf(response);
    if (found.state === 'succeeded') return found.response;
    if (found.state === 'failed') {
      logProviderFailure(this.spec.name, attemptId, found.error);
      throw found.error;
    }
    throw new ProviderError('ambiguous', 'timeout', 'the response had not ended at the deadline');
  }

  private async retrieve(id: string, maxResponseBytes: number, signal?: AbortSignal): Promise<Response> {
    const call = this.http.call(maxResponseBytes);
    // A signal of its own per retrieve: the SDK leaves a listener on the signal it is given, and a response
    // followed for a while would gather them on the call's.
    const own = deadline(this.spec.hardTimeoutMs, signal);
    try {
      return await this.client.responses.retrieve(id, {}, { signal: own.signal, fetchOptions: call.fetchOptions });
    } catch (error) {
      if (call.tooLarge) throw classifySdkError(OpenAI, error, false, call);
      throw error;
    } finally {
      own.clear();
    }
  }

  /** By the response id; an attempt whose create call never returned has none, and nobody can ever ask. */
  async lookup(ref: RequestRef, signal?: AbortSignal): Promise<LookupResult> {
    if (!ref.providerRequestId) return { state: 'unknowable', reason: 'the create call never returned a response id' };
    try {
      return lookupOf(await this.retrieve(ref.providerRequestId, ref.maxResponseBytes ?? LOOKUP_BYTES, signal));
    } catch (error) {
      if (error instanceof OpenAI.NotFoundError) {
        return { state: 'expired', reason: 'the provider no longer knows the response id (past its retention)' };
      }
      throw error;
    }
  }

  /**
   * Cancels a background response. A second cancel returns the cancelled response; a response that already
   * ended cannot be cancelled (400), and is then retrieved, so its result still competes under I5. The whole of it
   * (the retrieve too) has a deadline of its own, the provider's `timeoutMs`: the SDK's timeout stops at the
   * headers, and a cancel whose body stalls would otherwise hold its caller for ever.
   */
  async cancel(ref: RequestRef): Promise<LookupResult | undefined> {
    if (!ref.providerRequestId) return undefined;
    const call = this.http.call(ref.maxResponseBytes ?? LOOKUP_BYTES);
    const own = deadline(this.spec.timeoutMs);
    try {
      const options = { signal: own.signal, fetchOptions: call.fetchOptions };
      return lookupOf(await this.client.responses.cancel(ref.providerRequestId, options));
    } catch (error) {
      if (error instanceof OpenAI.BadRequestError) return this.lookup(ref, own.signal);
      if (error instanceof OpenAI.NotFoundError) {
        return { state: 'expired', reason: 'the provider no longer knows the response id (past its retention)' };
      }
      throw error;
    } finally {
      own.clear();
    }
  }
}

/** A looked-up response is read with the largest limit an operation may set: the operation is not known here. */
const LOOKUP_BYTES = 64 * 1024 * 1024;
