import {
  BatchWaitTimeoutError,
  errorFor,
  NetworkError,
  OnejobError,
  RequestTimeoutError,
  WaitTimeoutError,
} from './errors.js';
import { sseMessages } from './sse.js';
import {
  type Batch,
  type BatchCreated,
  type BatchJobPage,
  type BatchPage,
  type CreateBatchItem,
  type CreateJobRequest,
  type Job,
  type JobEvent,
  type JobPage,
  type ListBatchesQuery,
  type ListBatchJobsQuery,
  type ListJobsQuery,
  type Problem,
  TERMINAL_STATUSES,
} from './types.js';
import { uuidv7 } from './uuidv7.js';

export interface RetryOptions {
  /** Tries in all, the first included. Default 5. */
  maxAttempts?: number;
  /** Backoff: a random delay up to base × 2^(try-1), capped at maxDelayMs ("full jitter"). Defaults 250 and 8,000. */
  baseDelayMs?: number;
  maxDelayMs?: number;
  /** A Retry-After longer than this is not waited for: the error is thrown instead. Default 60,000. */
  maxRetryAfterMs?: number;
}

export interface OnejobClientOptions {
  /** Where the service answers, e.g. `http://localhost:3000`. */
  baseUrl: string;
  /** An API key (`npm run apikey` on the service). Give this or `token`. */
  apiKey?: string;
  /**
   * A token provider instead of a key: a JWT of an issuer the service trusts (your IdP's access token, a
   * Kubernetes projected service-account token read from its file). Called before the first request, and again
   * whenever the service answers 401 `token_expired`, after which the refused request is sent once more with the
   * new token (the service refused it before doing anything).
   */
  token?: () => string | Promise<string>;
  /** Per try; a try that gets no answer in time is retried like a network error. Default 10,000. */
  timeoutMs?: number;
  retry?: RetryOptions;
  /** Default: the global fetch (Node 20+). */
  fetch?: typeof fetch;
}

export interface CreatedJob {
  job: Job;
  /** True when the key was already bound to this intent: the existing job, nothing created (HTTP 200). */
  replayed: boolean;
  /** The key the job is bound to: the one given, or the UUIDv7 made for this call. */
  idempotencyKey: string;
  requestId: string | undefined;
  /** HTTP requests this call made (1 when nothing was retried). */
  tries: number;
}

export interface CreatedBatch {
  batch: BatchCreated;
  /** True when the batch key was already bound to this batch: the stored batch, nothing created (HTTP 200). */
  replayed: boolean;
  /** The batch's key: the one given, or the UUIDv7 made for this call. */
  idempotencyKey: string;
  requestId: string | undefined;
  tries: number;
}

interface Call {
  method: 'GET' | 'POST';
  path: string;
  query?: Record<string, string | number | undefined>;
  body?: unknown;
  headers?: Record<string, string>;
  /**
   * Whether repeating the request cannot do its effect twice, even when the first one may have been done without
   * us hearing of it: then network errors, timeouts and 502/504 are retried too. Otherwise only the answers that
   * say nothing was done (429, 503).
   */
  repeatable: boolean;
  extraTimeoutMs?: number;
}

interface Answer<T> {
  status: number;
  body: T;
  headers: Headers;
  tries: number;
}

const ALWAYS_RETRIED = new Set([429, 503]);
const RETRIED_WHEN_REPEATABLE = new Set([502, 504]);
/** The service holds a `Prefer: wait` for at most this long. */
const MAX_WAIT_SECONDS = 30;

/** Retry-After as seconds or an HTTP date (RFC 9110 §10.2.3), in milliseconds. */
function retryAfterMs(value: string | null): number | undefined {
  if (!value) return undefined;
  if (/^\d+$/.test(value.trim())) return Number(value.trim()) * 1000;
  const date = Date.parse(value);
  return Number.isNaN(date) ? undefined : Math.max(0, date - Date.now());
}

function parseProblem(text: string, contentType: string | null): Problem | undefined {
  if (!/json/i.test(contentType ?? '')) return undefined;
  try {
    const body = JSON.parse(text) as Problem;
    return typeof body?.code === 'string' ? body : undefined;
  } catch {
    return undefined;
  }
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/**
 * A client for onejob whose retries are safe by default: createJob binds one Idempotency-Key to the call and
 * sends it on every retry, so a retry after a lost answer gets the same job back (200, Idempotent-Replayed),
 * never a second one. The service binds a key for as long as the job exists (no TTL).
 */
export class OnejobClient {
  private readonly baseUrl: string;
  private readonly fetch: typeof fetch;
  private readonly timeoutMs: number;
  private readonly retry: Required<RetryOptions>;

  /** The token provider's last answer, until the service says it expired. */
  private token?: Promise<string>;

  constructor(private readonly options: OnejobClientOptions) {
    if ((options.apiKey === undefined) === (options.token === undefined)) {
      throw new TypeError('OnejobClient needs one of apiKey or token');
    }
    this.baseUrl = options.baseUrl.replace(/\/+$/, '');
    this.fetch = options.fetch ?? globalThis.fetch;
    this.timeoutMs = options.timeoutMs ?? 10_000;
    this.retry = { maxAttempts: 5, baseDelayMs: 250, maxDelayMs: 8_000, maxRetryAfterMs: 60_000, ...options.retry };
  }

  /**
   * Creates the job for an intent, or gets it back when the key is already bound to that same intent. Without an
   * `idempotencyKey`, one UUIDv7 is made for this call (never per try). Give your own key when the intent
   * outlives the process (a queue message id, an order id): a retry after a restart then finds the same job.
   */
  async createJob(
    intent: CreateJobRequest,
    options: { idempotencyKey?: string; waitSeconds?: number } = {},
  ): Promise<CreatedJob> {
    const idempotencyKey = options.idempotencyKey ?? uuidv7();
    const headers: Record<string, string> = { 'Idempotency-Key': idempotencyKey };
    if (options.waitSeconds) headers.Prefer = `wait=${options.waitSeconds}`;
    const answer = await this.call<Job>({
      method: 'POST',
      path: '/v1/jobs',
      body: intent,
      headers,
      repeatable: true,
      extraTimeoutMs: (options.waitSeconds ?? 0) * 1000,
    });
    return {
      job: answer.body,
      replayed: answer.headers.get('idempotent-replayed') === 'true',
      idempotencyKey,
      requestId: answer.headers.get('x-request-id') ?? undefined,
      tries: answer.tries,
    };
  }

  /** A job with its attempts; with `waitSeconds` (≤ 30) the service holds the answer until it is terminal. */
  async getJob(id: string, options: { waitSeconds?: number } = {}): Promise<Job> {
    const wait = Math.min(options.waitSeconds ?? 0, MAX_WAIT_SECONDS);
    const answer = await this.call<Job>({
      method: 'GET',
      path: `/v1/jobs/${encodeURIComponent(id)}`,
      headers: wait ? { Prefer: `wait=${wait}` } : {},
      repeatable: true,
      extraTimeoutMs: wait * 1000,
    });
    return answer.body;
  }

  /** One page of the owner's jobs, newest first; pass `nextCursor` back as `cursor` for the next. */
  async listJobs(query: ListJobsQuery = {}): Promise<JobPage> {
    return (await this.call<JobPage>({ method: 'GET', path: '/v1/jobs', query, repeatable: true })).body;
  }

  /**
   * Gives up the intent. Not retried after a lost answer: a second cancel of a cancelled job is a 409
   * (ConflictError, code job_terminal), which would hide that the first one worked.
   */
  async cancelJob(id: string): Promise<Job> {
    return (
      await this.call<Job>({ method: 'POST', path: `/v1/jobs/${encodeURIComponent(id)}/cancel`, repeatable: false })
    ).body;
  }

  /**
   * The job once it is terminal (succeeded, failed or cancelled), by long polls of at most 30 s each
   * (`Prefer: wait`). Throws WaitTimeoutError, carrying the last state, when `timeoutMs` passes first.
   */
  async waitForJob(id: string, options: { timeoutMs: number }): Promise<Job> {
    const deadline = Date.now() + options.timeoutMs;
    for (;;) {
      const wait = Math.min(MAX_WAIT_SECONDS, Math.floor((deadline - Date.now()) / 1000));
      const job = await this.getJob(id, { waitSeconds: Math.max(wait, 0) });
      if (TERMINAL_STATUSES.includes(job.status)) return job;
      if (wait <= 0 || Date.now() >= deadline) throw new WaitTimeoutError(job);
    }
  }

  /**
   * The job's timeline, live: every event so far, then each as it commits, until the service ends the stream
   * after the terminal event (and its grace for a late discarded result). A dropped connection, a 503 or the
   * service's restart is resumed by itself with Last-Event-ID: every event comes once, in order. Stop early with
   * `signal` or by leaving the loop. Throws the service's problem (NotFoundError for another owner's job).
   */
  async *streamJobEvents(
    id: string,
    options: { signal?: AbortSignal; lastEventId?: string } = {},
  ): AsyncGenerator<JobEvent> {
    let lastEventId = options.lastEventId;
    const url = `${this.baseUrl}/v1/jobs/${encodeURIComponent(id)}/events`;
    for (let failures = 0; ;) {
      options.signal?.throwIfAborted();
      const headers: Record<string, string> = {
        Authorization: `Bearer ${await this.credential()}`,
        Accept: 'text/event-stream',
      };
      if (lastEventId) headers['Last-Event-ID'] = lastEventId;
      let after: number | undefined;
      try {
        const response = await this.fetch(url, { headers, signal: options.signal });
        if (response.status === 204) return;
        if (response.ok && response.body) {
          for await (const message of sseMessages(response.body)) {
            if (message.id === undefined || message.event === 'message') continue;
            failures = 0;
            lastEventId = message.id;
            yield JSON.parse(message.data) as JobEvent;
          }
          // The service ended the stream: ask again, which answers 204 once nothing more can come.
          continue;
        }
        const text = await response.text();
        const problem = parseProblem(text, response.headers.get('content-type'));
        // A token past its time (the stream's credential ended it, or a reconnect met it): the provider's next one.
        const renew = this.expired(response.status, problem);
        if (!renew && !ALWAYS_RETRIED.has(response.status) && !RETRIED_WHEN_REPEATABLE.has(response.status)) {
          throw errorFor(response.status, problem, response.headers.get('x-request-id') ?? undefined);
        }
        after = renew ? 0 : retryAfterMs(response.headers.get('retry-after'));
      } catch (error) {
        if (error instanceof OnejobError || options.signal?.aborted) throw error;
        // A network error or a dropped stream: resume after the last event seen.
      }
      failures++;
      await sleep(this.delay(Math.min(failures, 6), after));
    }
  }

  /**
   * Creates up to 10,000 jobs in one request, all or none, or gets the batch back when its key is already bound
   * to the same items (in order) and metadata. The key is bound to the call, so every retry after a lost answer
   * sends it again and finds the same batch; without one, a UUIDv7 is made for this call (never per try). Each
   * item's `key` is that job's own idempotency key: a retry under a new batch key still gets the same jobs back.
   */
  async createBatch(
    items: CreateBatchItem[],
    options: { idempotencyKey?: string; metadata?: Record<string, unknown>; priority?: number } = {},
  ): Promise<CreatedBatch> {
    const idempotencyKey = options.idempotencyKey ?? uuidv7();
    const answer = await this.call<BatchCreated>({
      method: 'POST',
      path: '/v1/batches',
      body: {
        items,
        ...(options.metadata && { metadata: options.metadata }),
        ...(options.priority !== undefined && { priority: options.priority }),
      },
      headers: { 'Idempotency-Key': idempotencyKey },
      repeatable: true,
      // A full batch is written in one transaction: give it a millisecond per item beyond the usual timeout.
      extraTimeoutMs: items.length,
    });
    return {
      batch: answer.body,
      replayed: answer.headers.get('idempotent-replayed') === 'true',
      idempotencyKey,
      requestId: answer.headers.get('x-request-id') ?? undefined,
      tries: answer.tries,
    };
  }

  /** A batch with its progress (jobs per status, cost, completedAt). */
  async getBatch(id: string): Promise<Batch> {
    const path = `/v1/batches/${encodeURIComponent(id)}`;
    return (await this.call<Batch>({ method: 'GET', path, repeatable: true })).body;
  }

  /** One page of a batch's items with their jobs' status, in item order. */
  async listBatchJobs(id: string, query: ListBatchJobsQuery = {}): Promise<BatchJobPage> {
    const path = `/v1/batches/${encodeURIComponent(id)}/jobs`;
    return (await this.call<BatchJobPage>({ method: 'GET', path, query, repeatable: true })).body;
  }

  /** One page of the owner's batches, newest first. */
  async listBatches(query: ListBatchesQuery = {}): Promise<BatchPage> {
    return (await this.call<BatchPage>({ method: 'GET', path: '/v1/batches', query, repeatable: true })).body;
  }

  /** Cancels every job the batch created that is not terminal (not those it replayed). Repeatable. */
  async cancelBatch(id: string): Promise<Batch> {
    const path = `/v1/batches/${encodeURIComponent(id)}/cancel`;
    return (await this.call<Batch>({ method: 'POST', path, repeatable: true })).body;
  }

  /**
   * The batch once every job of it is terminal, read every `pollMs` (default 1,000). Throws BatchWaitTimeoutError,
   * carrying the last state, when `timeoutMs` passes first.
   */
  async waitForBatch(id: string, options: { timeoutMs: number; pollMs?: number }): Promise<Batch> {
    const deadline = Date.now() + options.timeoutMs;
    for (;;) {
      const batch = await this.getBatch(id);
      if (batch.status === 'completed') return batch;
      const left = deadline - Date.now();
      if (left <= 0) throw new BatchWaitTimeoutError(batch);
      await sleep(Math.min(options.pollMs ?? 1000, left));
    }
  }

  private async call<T>(call: Call): Promise<Answer<T>> {
    const url = new URL(this.baseUrl + call.path);
    for (const [name, value] of Object.entries(call.query ?? {})) {
      if (value !== undefined) url.searchParams.set(name, String(value));
    }
    const headers: Record<string, string> = { Accept: 'application/json', ...call.headers };
    if (call.body !== undefined) headers['Content-Type'] = 'application/json';
    const body = call.body === undefined ? undefined : JSON.stringify(call.body);

    let renewed = false;
    for (let tries = 1; ; tries++) {
      let failure: OnejobError;
      let retryable: boolean;
      let after: number | undefined;
      try {
        headers.Authorization = `Bearer ${await this.credential()}`;
        const response = await this.fetch(url, {
          method: call.method,
          headers,
          body,
          signal: AbortSignal.timeout(this.timeoutMs + (call.extraTimeoutMs ?? 0)),
        });
        const text = await response.text();
        if (response.ok) {
          return {
            status: response.status,
            body: (text ? JSON.parse(text) : undefined) as T,
            headers: response.headers,
            tries,
          };
        }
        const problem = parseProblem(text, response.headers.get('content-type'));
        // A token past its time: one more try with the provider's next token (refused before anything happened).
        if (!renewed && this.expired(response.status, problem)) {
          renewed = true;
          tries--;
          continue;
        }
        failure = errorFor(response.status, problem, response.headers.get('x-request-id') ?? undefined);
        retryable =
          ALWAYS_RETRIED.has(response.status) || (call.repeatable && RETRIED_WHEN_REPEATABLE.has(response.status));
        after = retryAfterMs(response.headers.get('retry-after'));
      } catch (error) {
        const timedOut = (error as Error)?.name === 'TimeoutError';
        failure = timedOut
          ? new RequestTimeoutError(`${call.method} ${call.path}: no answer within ${this.timeoutMs} ms`, {
              cause: error,
            })
          : new NetworkError(`${call.method} ${call.path}: ${(error as Error)?.message}`, { cause: error });
        retryable = call.repeatable;
      }
      if (!retryable || tries >= this.retry.maxAttempts) throw failure;
      if (after !== undefined && after > this.retry.maxRetryAfterMs) throw failure;
      await sleep(this.delay(tries, after));
    }
  }

  /** The key, or the provider's current token (asked for once, and again after `token_expired`). */
  private credential(): Promise<string> {
    if (this.options.apiKey !== undefined) return Promise.resolve(this.options.apiKey);
    this.token ??= Promise.resolve(this.options.token!()).catch((error: unknown) => {
      this.token = undefined;
      throw error;
    });
    return this.token;
  }

  /** True, and the token forgotten, when the service refused it as expired and a provider can give another. */
  private expired(status: number, problem: { code?: string } | undefined): boolean {
    if (status !== 401 || problem?.code !== 'token_expired' || this.options.token === undefined) return false;
    this.token = undefined;
    return true;
  }

  /** Retry-After when the service gave one (plus a little jitter so clients do not return in step), else full jitter. */
  private delay(tries: number, retryAfter: number | undefined): number {
    const jitter = Math.random();
    if (retryAfter !== undefined) return retryAfter + jitter * this.retry.baseDelayMs;
    return jitter * Math.min(this.retry.maxDelayMs, this.retry.baseDelayMs * 2 ** (tries - 1));
  }
}
