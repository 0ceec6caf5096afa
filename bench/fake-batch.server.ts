import { randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { Readable } from 'node:stream';

/**
 * A fake of both providers' batch APIs on 127.0.0.1, for the tests and `npm run bench`, driven through the real SDKs
 * (`openai` v6 and `@anthropic-ai/sdk`): OpenAI's Batch API with its Files API (`baseURL` `openaiUrl`, which ends in
 * `/v1`) and Anthropic's Message Batches (`baseURL` `anthropicUrl`, the bare origin: the SDK's paths carry `/v1`).
 * The wire format is the SDKs' types (openai/resources/batches.d.ts and files.d.ts,
 * @anthropic-ai/sdk/resources/messages/batches.d.ts) and the API references: paths, field names, status names,
 * cursor pagination, and the result lines. Where the references say nothing (the exact codes of a file that fails
 * validation, `request_counts` of an expired or cancelled OpenAI batch), the fake's choice is named where it is made.
 *
 * A batch's life is a function of time and of its script (`BatchScript`: how long each phase lasts, when it expires,
 * how big its output is), evaluated whenever it is read, so nothing runs in the background; a phase that lasts
 * `Infinity` waits for `advance()`. Which lines are done, in which order they come out, and what each line says are
 * fixed when the batch is created (a seeded shuffle, the rules and responder of that moment), so two readers of one
 * file, or one reader starting again, read the same bytes. Output files are generated line by line as they are
 * sent, with backpressure: a 200 MB file is never held.
 *
 * It lives in bench/ so that both the tests (test/fakes/fake-batch.server.ts re-exports it) and the bench can import
 * it, as bench/fake-openai.server.ts does for direct calls.
 */

export type BatchProvider = 'openai' | 'anthropic';

/** What a request to the fake was, for the counts (`calls`) and a bench's "provider requests". */
export type BatchRequestKind =
  /** OpenAI `POST /v1/files`. */
  | 'upload'
  /** `POST /v1/batches`, `POST /v1/messages/batches`. */
  | 'create'
  /** A batch's status read: `GET /v1/batches/{id}`, `GET /v1/messages/batches/{id}`. */
  | 'retrieve'
  | 'cancel'
  | 'list'
  /** A file's content (`GET /v1/files/{id}/content`) or Anthropic's `results_url`. */
  | 'results'
  /** OpenAI `GET /v1/files/{id}` (the file object, not its content). */
  | 'file'
  /** `DELETE /v1/files/{id}`, `DELETE /v1/messages/batches/{id}`. */
  | 'delete'
  /** Anything else (answered 404). */
  | 'other';

export const BATCH_REQUEST_KINDS: readonly BatchRequestKind[] = [
  'upload',
  'create',
  'retrieve',
  'cancel',
  'list',
  'results',
  'file',
  'delete',
  'other',
];

/** How one batch goes. Unset fields take the fake's defaults (`setDefaults`). */
export interface BatchScript {
  /** OpenAI `validating` (Anthropic has no such phase). Default 20 ms. */
  validatingMs?: number;
  /** `in_progress`: its lines are done evenly over this time, in the batch's shuffled order. Default 100 ms. */
  inProgressMs?: number;
  /** OpenAI `finalizing`, once every line is done. Default 20 ms. */
  finalizingMs?: number;
  /** OpenAI `cancelling`, Anthropic `canceling`, after a cancel. Default 20 ms. */
  cancellingMs?: number;
  /** The completion window from creation (24 h): a batch not ended by then expires with the lines done so far. */
  windowMs?: number;
  /** The batch expires the moment this many lines are done (`expired` / `ended`, the rest `batch_expired`/`expired`). */
  expireAfterLines?: number;
  /** OpenAI: the input fails validation with this error (status `failed`, `errors.data`, no files). */
  fail?: { code: string; message: string };
  /** About this many bytes of output in all (OpenAI's output file, Anthropic's results), spread over the succeeded
   * lines by padding each line's output text with trailing spaces (still the same JSON), generated as it is sent. */
  outputBytes?: number;
  /** The seed of the shuffles (processing order, file order). Default: the batch's sequence number. */
  seed?: number;
  /** Lines done and written in a shuffled order (true, the default) or in input order. */
  shuffle?: boolean;
}

/** A line request as the fake received it, for a responder. */
export interface LineRequest {
  provider: BatchProvider;
  batchId: string;
  customId: string;
  /** Its position in the input (0-based). */
  index: number;
  /** `/v1/chat/completions`, `/v1/responses`, or `/v1/messages` (Anthropic). */
  endpoint: string;
  /** OpenAI: the line's `body`; Anthropic: the request's `params`. */
  body: Record<string, unknown>;
}

/** What the model "says" for a succeeded line: a string is the output text as it is, anything else is JSON-encoded. */
export type Responder = (line: LineRequest) => unknown;

/**
 * What happens to the lines whose `custom_id` matches, when they are done (first matching rule wins). With `status`,
 * the line errors as the provider reports an HTTP error of that status: OpenAI a line in the error file with
 * `response.status_code` and an error body, Anthropic an `errored` result whose error type is the status's
 * (400 `invalid_request_error`, 429 `rate_limit_error`, 500 `api_error`, 529 `overloaded_error`, ...). With
 * `errorCode` (OpenAI), a line-level error without a response (`response: null`, `error: {code, message}`, as
 * `request_timeout`); Anthropic reports it as `api_error`. With `text`, the line succeeds with that output text; with
 * `bytes`, its line is padded to about that many bytes.
 */
export interface LineRule {
  match: string | readonly string[] | RegExp | ((customId: string) => boolean);
  status?: number;
  errorCode?: string;
  /** The error's type (default: the status's) and message. */
  type?: string;
  message?: string;
  text?: string;
  bytes?: number;
}

/**
 * A scripted fault for the next request of a kind: answered with `status` (and the provider's error body), never
 * answered (`hang`), or its connection reset (`reset`), in each case without effect; or, with `lostAnswer`, the
 * request takes effect (the batch is created, the cancel is made) and its answer never comes (`hang`) or the
 * connection is reset after the effect (`reset`): a client that dies between the call and reading its answer.
 */
export type BatchFault =
  | { status: number; body?: unknown; headers?: Record<string, string> }
  | { hang: true }
  | { reset: true }
  | { lostAnswer: 'hang' | 'reset' };

/** One request the fake received. */
export interface BatchCall {
  provider: BatchProvider;
  kind: BatchRequestKind;
  method: string;
  /** The URL's path, without its query. */
  path: string;
  /** The batch (or, for `upload`/`file`, the file) it was about, when it named one. */
  target?: string;
  /** Date.now() when the request arrived. */
  at: number;
  /** The HTTP status answered (undefined while serving, for a hang or a reset). */
  status?: number;
  /** Body bytes handed to the socket, for a streamed file. */
  bytesWritten?: number;
  /** The most bytes queued in the response's buffer at once, for a streamed file (backpressure kept it small). */
  maxBuffered?: number;
  /** Date.now() when a streamed file's last byte was handed to the socket. */
  endedAt?: number;
  /** The `Idempotency-Key` header, when sent. */
  idempotencyKey?: string;
}

/** The fake's own phases; each provider names them its way (`status`, `processing_status`). */
type Phase = 'validating' | 'in_progress' | 'finalizing' | 'cancelling' | 'ended';
type EndReason = 'completed' | 'failed' | 'expired' | 'cancelled';

interface Line {
  index: number;
  customId: string;
  body: Record<string, unknown>;
  /** Anthropic: the params fail validation (an `errored` line, `invalid_request_error`). */
  invalid?: string;
}

/** A batch's script with the defaults filled in, fixed at its creation. */
export interface ResolvedScript {
  validatingMs: number;
  inProgressMs: number;
  finalizingMs: number;
  cancellingMs: number;
  windowMs: number;
  expireAfterLines?: number;
  fail?: { code: string; message: string };
  outputBytes?: number;
  seed: number;
  shuffle: boolean;
}

type Outcome =
  | { kind: 'succeeded'; text: string; padTo?: number }
  | { kind: 'errored'; status: number; type?: string; message: string }
  | { kind: 'line_error'; code: string; message: string };

/** A batch as the fake holds it (read-only for tests: `batch(id)`). */
export interface FakeBatch {
  provider: BatchProvider;
  id: string;
  /** 1, 2, ... across both providers, in creation order. */
  seq: number;
  createdAt: number;
  script: ResolvedScript;
  phase: Phase;
  /** Date.now() at which the current phase began. */
  phaseAt: number;
  endReason?: EndReason;
  /** When each status began (ms): `in_progress`, `finalizing`, `cancelling`, and the end reason's. */
  times: Partial<Record<'in_progress' | 'finalizing' | 'cancelling' | EndReason, number>>;
  lines: Line[];
  /** The processing order: the first `done` of these are done. */
  order: number[];
  /** The order lines are written in the files. */
  fileOrder: number[];
  done: number;
  /** 1 for a line done when the batch ended. */
  doneMask?: Uint8Array;
  /** OpenAI. */
  endpoint: string;
  inputFileId?: string;
  metadata: Record<string, string> | null;
  model: string | null;
  validationErrors: Array<{ code: string; message: string; param: string | null; line: number | null }>;
  outputFileId?: string;
  errorFileId?: string;
  /** Date.now() of each status read (`retrieve`) of this batch. */
  retrieves: number[];
  cancels: number;
  /** The rules and responder of the moment it was created: what its lines say never changes. */
  rules: LineRule[];
  responder: Responder;
}

interface StoredFile {
  id: string;
  purpose: string;
  filename: string;
  createdAt: number;
  /** An uploaded file's bytes. */
  content?: Buffer;
  /** A batch's generated output or error file. */
  batch?: FakeBatch;
  which?: 'output' | 'error';
  /** Computed once, by generating the file without sending it. */
  bytes?: number;
}

/** The providers' limits (the Batch API: 50,000 requests and 200 MB per file; Message Batches: 100,000 or 256 MB). */
export interface BatchLimits {
  openaiMaxRequests: number;
  openaiMaxBytes: number;
  anthropicMaxRequests: number;
  anthropicMaxBytes: number;
}

const DEFAULT_LIMITS: BatchLimits = {
  openaiMaxRequests: 50_000,
  openaiMaxBytes: 200 * 1024 * 1024,
  anthropicMaxRequests: 100_000,
  anthropicMaxBytes: 256 * 1024 * 1024,
};

const DEFAULT_SCRIPT = {
  validatingMs: 20,
  inProgressMs: 100,
  finalizingMs: 20,
  cancellingMs: 20,
  windowMs: 24 * 3600_000,
  shuffle: true,
};

const OPENAI_ENDPOINTS = ['/v1/responses', '/v1/chat/completions'];
const DAY_MS = 24 * 3600_000;

type Reply =
  | { status: number; json: unknown; headers?: Record<string, string> }
  | { status: number; lines: Iterable<string>; contentType: string };

const openaiError = (message: string, type = 'invalid_request_error', param: string | null = null, code?: string) => ({
  error: { message, type, param, code: code ?? null },
});

const anthropicError = (type: string, message: string) => ({
  type: 'error',
  error: { type, message },
  request_id: `req_${randomBytes(12).toString('hex')}`,
});

/** The error type a provider gives an HTTP status. */
function openaiErrorType(status: number): string {
  if (status === 429) return 'rate_limit_exceeded';
  if (status >= 500) return 'server_error';
  return 'invalid_request_error';
}

function anthropicErrorType(status: number): string {
  const types: Record<number, string> = {
    400: 'invalid_request_error',
    401: 'authentication_error',
    402: 'billing_error',
    403: 'permission_error',
    404: 'not_found_error',
    413: 'request_too_large',
    429: 'rate_limit_error',
    500: 'api_error',
    504: 'timeout_error',
    529: 'overloaded_error',
  };
  return types[status] ?? (status >= 500 ? 'api_error' : 'invalid_request_error');
}

/** mulberry32: a small seeded generator, so a batch's order is the same on every run. */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function shuffled(n: number, seed: number, shuffle: boolean): number[] {
  const out = Array.from({ length: n }, (_, i) => i);
  if (!shuffle) return out;
  const next = rng(seed);
  for (let i = n - 1; i > 0; i--) {
    const j = Math.floor(next() * (i + 1));
    [out[i], out[j]] = [out[j], out[i]];
  }
  return out;
}

const seconds = (ms: number | undefined) => (ms === undefined ? null : Math.floor(ms / 1000));
const iso = (ms: number | undefined) => (ms === undefined ? null : new Date(ms).toISOString());

/** The text of a content that is a string or an array of parts (`text`, `input_text`). */
function textOf(content: unknown): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  return content
    .map((part) => (part && typeof part === 'object' && typeof part.text === 'string' ? part.text : ''))
    .join('');
}

/** The last user message of a chat completion, a response (`input`) or an Anthropic message's params. */
export function lastUserText(body: Record<string, unknown>): string {
  if (typeof body.input === 'string') return body.input;
  const messages = (
    Array.isArray(body.messages) ? body.messages : Array.isArray(body.input) ? body.input : []
  ) as Array<Record<string, unknown>>;
  const user = [...messages].reverse().find((m) => m && m.role === 'user');
  return user ? textOf(user.content) : '';
}

/** The default responder: `{"summary": <the last user message>}`, so a test can tell each line's output its input. */
export const echoSummary: Responder = (line) => ({ summary: lastUserText(line.body) });

const matches = (rule: LineRule, customId: string) => {
  const m = rule.match;
  if (typeof m === 'string') return m === customId;
  if (m instanceof RegExp) return m.test(customId);
  if (typeof m === 'function') return m(customId);
  return m.includes(customId);
};

export class FakeBatchServer {
  url = '';
  /** `baseURL` for `new OpenAI(...)`. */
  openaiUrl = '';
  /** `baseURL` for `new Anthropic(...)`. */
  anthropicUrl = '';
  /** Every request, in order of arrival. */
  readonly log: BatchCall[] = [];
  /** Requests counted by provider and kind. */
  readonly calls: Record<BatchProvider, Record<BatchRequestKind, number>> = {
    openai: FakeBatchServer.zeroCounts(),
    anthropic: FakeBatchServer.zeroCounts(),
  };
  limits: BatchLimits = { ...DEFAULT_LIMITS };
  private readonly batchesById = new Map<string, FakeBatch>();
  private readonly files = new Map<string, StoredFile>();
  private defaults: BatchScript = { ...DEFAULT_SCRIPT };
  private readonly scripts: Record<BatchProvider, BatchScript[]> = { openai: [], anthropic: [] };
  private readonly faults = new Map<string, BatchFault[]>();
  private rules: LineRule[] = [];
  private responder: Responder = echoSummary;
  private seq = 0;
  private readonly sockets = new Set<Socket>();
  private server?: Server;

  private static zeroCounts(): Record<BatchRequestKind, number> {
    return Object.fromEntries(BATCH_REQUEST_KINDS.map((k) => [k, 0])) as Record<BatchRequestKind, number>;
  }

  async start(): Promise<this> {
    this.server = createServer((req, res) => void this.handle(req, res));
    this.server.keepAliveTimeout = 30_000;
    this.server.on('connection', (socket) => {
      this.sockets.add(socket);
      socket.on('close', () => this.sockets.delete(socket));
    });
    await new Promise<void>((resolve) => this.server!.listen(0, '127.0.0.1', 511, resolve));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    this.openaiUrl = `${this.url}/v1`;
    this.anthropicUrl = this.url;
    return this;
  }

  async stop(): Promise<void> {
    for (const socket of this.sockets) socket.destroy();
    await new Promise<void>((resolve) => this.server?.close(() => resolve()) ?? resolve());
  }

  /** Forgets every batch, file, script, rule, fault and count; the defaults and limits go back to the providers'. */
  reset(): void {
    this.log.length = 0;
    for (const provider of ['openai', 'anthropic'] as const) {
      Object.assign(this.calls[provider], FakeBatchServer.zeroCounts());
      this.scripts[provider].length = 0;
    }
    this.batchesById.clear();
    this.files.clear();
    this.faults.clear();
    this.defaults = { ...DEFAULT_SCRIPT };
    this.limits = { ...DEFAULT_LIMITS };
    this.rules = [];
    this.responder = echoSummary;
  }

  // ---- control -------------------------------------------------------------------------------------------------

  /** Changes the defaults of every batch created from now on (both providers). */
  setDefaults(script: BatchScript): this {
    this.defaults = { ...this.defaults, ...script };
    return this;
  }

  /** Scripts the next batches created at `provider`, in order; after them, the defaults. */
  nextBatches(provider: BatchProvider, ...scripts: BatchScript[]): this {
    this.scripts[provider].push(...scripts);
    return this;
  }

  /** Line rules for batches created from now on, checked before the ones already set (first match wins). */
  rule(...rules: LineRule[]): this {
    this.rules = [...rules, ...this.rules];
    return this;
  }

  /** The lines whose `custom_id` matches error with `status` (OpenAI `status_code`, Anthropic the status's type). */
  failLines(match: LineRule['match'], status: number, message?: string): this {
    return this.rule({ match, status, message });
  }

  /** What succeeded lines say, for batches created from now on (default `echoSummary`). */
  respond(responder: Responder): this {
    this.responder = responder;
    return this;
  }

  /** The next requests of `kind` at `provider` meet these faults, in order. */
  fault(provider: BatchProvider, kind: BatchRequestKind, ...faults: BatchFault[]): this {
    const key = `${provider}:${kind}`;
    this.faults.set(key, [...(this.faults.get(key) ?? []), ...faults]);
    return this;
  }

  /**
   * Ends the batch's current phase now: `validating` -> `in_progress` (or `failed`), `in_progress` -> every line
   * done (`finalizing`, or Anthropic `ended`; `expired` at `expireAfterLines`), `finalizing` -> `completed`,
   * `cancelling` -> `cancelled` (Anthropic `ended`). Returns the provider's status after it.
   */
  advance(id: string): string {
    const b = this.mustGet(id);
    const now = Date.now();
    this.tick(b, now);
    switch (b.phase) {
      case 'validating':
        this.endValidation(b, now);
        break;
      case 'in_progress':
        this.setDone(b, b.lines.length, now);
        break;
      case 'finalizing':
        this.finish(b, 'completed', now);
        break;
      case 'cancelling':
        this.finish(b, 'cancelled', now);
        break;
      case 'ended':
        throw new Error(`batch ${id} has ended (${b.endReason})`);
    }
    return this.status(id);
  }

  /** Marks `linesDone` of an `in_progress` batch's lines done (never fewer than already are), as time would. */
  progress(id: string, linesDone: number): string {
    const b = this.mustGet(id);
    const now = Date.now();
    this.tick(b, now);
    if (b.phase !== 'in_progress') throw new Error(`batch ${id} is not in progress (${this.status(id)})`);
    this.setDone(b, linesDone, now);
    return this.status(id);
  }

  /** Expires the batch now with `linesDone` lines done (default: those done by now); its other lines did not run. */
  expire(id: string, linesDone?: number): string {
    const b = this.mustGet(id);
    const now = Date.now();
    this.tick(b, now);
    if (b.phase === 'ended' || b.phase === 'cancelling') throw new Error(`batch ${id} cannot expire now`);
    if (b.phase === 'validating') this.endValidation(b, now);
    if ((b.phase as Phase) === 'ended') return this.status(id); // it failed validation
    if (linesDone !== undefined) b.done = Math.max(0, Math.min(b.lines.length, linesDone));
    this.finish(b, 'expired', now);
    return this.status(id);
  }

  /** The provider's status of a batch now: OpenAI's `status`, Anthropic's `processing_status`. */
  status(id: string): string {
    const b = this.mustGet(id);
    this.tick(b, Date.now());
    return this.statusOf(b);
  }

  /** A batch as the fake holds it, its phase brought up to now. */
  batch(id: string): FakeBatch | undefined {
    const b = this.batchesById.get(id);
    if (b) this.tick(b, Date.now());
    return b;
  }

  /** Every batch, oldest first (of one provider, when given). */
  batches(provider?: BatchProvider): FakeBatch[] {
    const now = Date.now();
    const all = [...this.batchesById.values()].filter((b) => !provider || b.provider === provider);
    for (const b of all) this.tick(b, now);
    return all;
  }

  /** The batch (OpenAI) whose metadata has every given key and value. */
  findByMetadata(metadata: Record<string, string>): FakeBatch[] {
    return this.batches('openai').filter((b) => Object.entries(metadata).every(([k, v]) => b.metadata?.[k] === v));
  }

  /** The `custom_id`s that are lines of more than one batch at one provider (a line submitted twice). */
  duplicateLines(): string[] {
    const seen = new Map<string, number>();
    for (const b of this.batchesById.values()) {
      for (const line of b.lines) {
        const key = `${b.provider}:${line.customId}`;
        seen.set(key, (seen.get(key) ?? 0) + 1);
      }
    }
    return [...seen].filter(([, n]) => n > 1).map(([key]) => key.slice(key.indexOf(':') + 1));
  }

  /** Requests at a provider (both, when not given) of the given kinds (default: every kind). */
  totalCalls(provider?: BatchProvider, kinds: readonly BatchRequestKind[] = BATCH_REQUEST_KINDS): number {
    const providers: BatchProvider[] = provider ? [provider] : ['openai', 'anthropic'];
    let sum = 0;
    for (const p of providers) for (const k of kinds) sum += this.calls[p][k];
    return sum;
  }

  // ---- the lifecycle -------------------------------------------------------------------------------------------

  private mustGet(id: string): FakeBatch {
    const b = this.batchesById.get(id);
    if (!b) throw new Error(`no batch ${id}`);
    return b;
  }

  private statusOf(b: FakeBatch): string {
    if (b.provider === 'anthropic') {
      return b.phase === 'ended' ? 'ended' : b.phase === 'cancelling' ? 'canceling' : 'in_progress';
    }
    return b.phase === 'ended' ? b.endReason! : b.phase;
  }

  /** Brings a batch's phase up to `now`, each move stamped at the moment it happened, not when it was noticed. */
  private tick(b: FakeBatch, now: number): void {
    for (let guard = 0; guard < 8; guard++) {
      const s = b.script;
      const windowEnd = b.createdAt + s.windowMs;
      switch (b.phase) {
        case 'validating': {
          const end = b.phaseAt + s.validatingMs;
          if (now >= windowEnd && windowEnd < end) return this.finish(b, 'expired', windowEnd);
          if (now < end) return;
          this.endValidation(b, end);
          continue;
        }
        case 'in_progress': {
          const total = b.lines.length;
          const until = Math.min(now, windowEnd);
          const elapsed = Math.max(0, until - b.phaseAt);
          const timed = s.inProgressMs <= 0 ? total : Math.floor((total * elapsed) / s.inProgressMs);
          const target = Math.min(total, Math.max(b.done, timed));
          // The moment the `target`-th line was done, as time would have it (now when moved by hand).
          const lineAt = (n: number) =>
            Number.isFinite(s.inProgressMs) && timed >= n ? b.phaseAt + (s.inProgressMs * n) / Math.max(1, total) : now;
          if (s.expireAfterLines !== undefined && target >= s.expireAfterLines) {
            b.done = s.expireAfterLines;
            return this.finish(b, 'expired', Math.min(now, lineAt(s.expireAfterLines)));
          }
          b.done = target;
          if (b.done >= total) {
            const at = Math.min(now, lineAt(total));
            if (b.provider === 'anthropic') return this.finish(b, 'completed', at);
            this.enter(b, 'finalizing', at);
            continue;
          }
          if (now >= windowEnd) return this.finish(b, 'expired', windowEnd);
          return;
        }
        case 'finalizing': {
          const end = b.phaseAt + s.finalizingMs;
          if (now >= windowEnd && windowEnd < end) return this.finish(b, 'expired', windowEnd);
          if (now < end) return;
          return this.finish(b, 'completed', end);
        }
        case 'cancelling': {
          const end = b.phaseAt + s.cancellingMs;
          if (now < end) return;
          return this.finish(b, 'cancelled', end);
        }
        case 'ended':
          return;
      }
    }
  }

  private enter(b: FakeBatch, phase: 'in_progress' | 'finalizing' | 'cancelling', at: number): void {
    b.phase = phase;
    b.phaseAt = at;
    b.times[phase] = at;
  }

  private setDone(b: FakeBatch, linesDone: number, now: number): void {
    const total = b.lines.length;
    const n = Math.max(b.done, Math.min(total, linesDone));
    if (b.script.expireAfterLines !== undefined && n >= b.script.expireAfterLines) {
      b.done = b.script.expireAfterLines;
      return this.finish(b, 'expired', now);
    }
    b.done = n;
    if (n < total) return;
    if (b.provider === 'anthropic') return this.finish(b, 'completed', now);
    this.enter(b, 'finalizing', now);
  }

  private endValidation(b: FakeBatch, at: number): void {
    if (b.script.fail) {
      b.validationErrors.push({ code: b.script.fail.code, message: b.script.fail.message, param: null, line: null });
    }
    if (b.validationErrors.length > 0) return this.finish(b, 'failed', at);
    this.enter(b, 'in_progress', at);
  }

  private finish(b: FakeBatch, reason: EndReason, at: number): void {
    b.phase = 'ended';
    b.phaseAt = at;
    b.endReason = reason;
    b.times[reason] = at;
    if (reason === 'failed') {
      b.done = 0;
      return;
    }
    b.doneMask = new Uint8Array(b.lines.length);
    for (let i = 0; i < b.done; i++) b.doneMask[b.order[i]] = 1;
    if (b.provider !== 'openai') return;
    let output = 0;
    let errors = 0;
    for (const line of b.lines) {
      if (b.doneMask[line.index] && this.outcome(b, line).kind === 'succeeded') output++;
      else errors++;
    }
    if (output > 0) b.outputFileId = this.addOutputFile(b, 'output', at);
    if (errors > 0) b.errorFileId = this.addOutputFile(b, 'error', at);
  }

  private addOutputFile(b: FakeBatch, which: 'output' | 'error', at: number): string {
    const id = `file-${randomBytes(12).toString('hex')}`;
    this.files.set(id, {
      id,
      purpose: 'batch_output',
      filename: `${b.id}_${which}.jsonl`,
      createdAt: at,
      batch: b,
      which,
    });
    return id;
  }

  /** What a done line comes out as: fixed by the batch's rules, its responder, and the line's params. */
  private outcome(b: FakeBatch, line: Line): Outcome {
    const rule = b.rules.find((r) => matches(r, line.customId));
    if (rule?.status !== undefined) {
      return {
        kind: 'errored',
        status: rule.status,
        type: rule.type,
        message: rule.message ?? `scripted ${rule.status}`,
      };
    }
    if (rule?.errorCode !== undefined) {
      return { kind: 'line_error', code: rule.errorCode, message: rule.message ?? `scripted ${rule.errorCode}` };
    }
    if (line.invalid) return { kind: 'errored', status: 400, message: line.invalid };
    const said =
      rule?.text ??
      b.responder({
        provider: b.provider,
        batchId: b.id,
        customId: line.customId,
        index: line.index,
        endpoint: b.endpoint,
        body: line.body,
      });
    return { kind: 'succeeded', text: typeof said === 'string' ? said : JSON.stringify(said), padTo: rule?.bytes };
  }

  /** Counts of succeeded and errored lines among those done by now, and the rest. */
  private tally(b: FakeBatch): { succeeded: number; errored: number; notDone: number } {
    let succeeded = 0;
    let errored = 0;
    for (let i = 0; i < b.done; i++) {
      if (this.outcome(b, b.lines[b.order[i]]).kind === 'succeeded') succeeded++;
      else errored++;
    }
    return { succeeded, errored, notDone: b.lines.length - b.done };
  }

  // ---- the lines of the files ----------------------------------------------------------------------------------

  /** The bytes each succeeded line is padded to, for `outputBytes`. */
  private padTarget(b: FakeBatch): number | undefined {
    if (!b.script.outputBytes) return undefined;
    const succeeded = this.tally(b).succeeded;
    return succeeded > 0 ? Math.floor(b.script.outputBytes / succeeded) : undefined;
  }

  private usageOf(line: Line, text: string): { input: number; output: number } {
    const prompt = JSON.stringify(line.body.messages ?? line.body.input ?? '') + JSON.stringify(line.body.system ?? '');
    return { input: Math.ceil(prompt.length / 4), output: Math.max(1, Math.ceil(text.length / 4)) };
  }

  /** One result line (with its newline) of a done or not-done line, padded to `padTo` bytes when given. */
  private resultLine(b: FakeBatch, line: Line, padTarget: number | undefined): string {
    const done = b.doneMask?.[line.index] === 1;
    const outcome: Outcome | undefined = done ? this.outcome(b, line) : undefined;
    const build = (pad: number) =>
      `${JSON.stringify(
        b.provider === 'openai' ? this.openaiLine(b, line, outcome, pad) : this.anthropicLine(b, line, outcome, pad),
      )}\n`;
    const text = build(0);
    const target = outcome?.kind === 'succeeded' ? (outcome.padTo ?? padTarget) : undefined;
    const bytes = Buffer.byteLength(text);
    return target !== undefined && target > bytes ? build(target - bytes) : text;
  }

  private openaiLine(b: FakeBatch, line: Line, outcome: Outcome | undefined, pad: number): unknown {
    const id = `batch_req_${b.id.slice(6, 18)}${String(line.index).padStart(6, '0')}`;
    const requestId = `req_${b.seq}_${line.index}`;
    const base = { id, custom_id: line.customId };
    if (!outcome) {
      const cancelled = b.endReason === 'cancelled';
      return {
        ...base,
        response: null,
        error: cancelled
          ? { code: 'batch_cancelled', message: 'This request was not executed because the batch was cancelled.' }
          : {
              code: 'batch_expired',
              message: 'This request could not be executed before the completion window expired.',
            },
      };
    }
    if (outcome.kind === 'line_error') {
      return { ...base, response: null, error: { code: outcome.code, message: outcome.message } };
    }
    if (outcome.kind === 'errored') {
      return {
        ...base,
        response: {
          status_code: outcome.status,
          request_id: requestId,
          body: openaiError(outcome.message, outcome.type ?? openaiErrorType(outcome.status)),
        },
        error: null,
      };
    }
    const text = outcome.text + ' '.repeat(pad);
    const usage = this.usageOf(line, outcome.text);
    const model = String(line.body.model ?? 'fake');
    const created = seconds(b.times.in_progress ?? b.createdAt);
    const body =
      b.endpoint === '/v1/responses'
        ? {
            id: `resp_${b.seq}_${line.index}`,
            object: 'response',
            created_at: created,
            status: 'completed',
            background: false,
            error: null,
            incomplete_details: null,
            instructions: line.body.instructions ?? null,
            max_output_tokens: line.body.max_output_tokens ?? null,
            metadata: line.body.metadata ?? {},
            model,
            output: [
              {
                type: 'message',
                id: `msg_${b.seq}_${line.index}`,
                status: 'completed',
                role: 'assistant',
                content: [{ type: 'output_text', text, annotations: [] }],
              },
            ],
            parallel_tool_calls: true,
            temperature: line.body.temperature ?? 1,
            text: line.body.text ?? { format: { type: 'text' } },
            tool_choice: 'auto',
            tools: [],
            top_p: 1,
            usage: {
              input_tokens: usage.input,
              input_tokens_details: { cached_tokens: 0 },
              output_tokens: usage.output,
              output_tokens_details: { reasoning_tokens: 0 },
              total_tokens: usage.input + usage.output,
            },
          }
        : {
            id: `chatcmpl-${b.seq}-${line.index}`,
            object: 'chat.completion',
            created,
            model,
            choices: [
              {
                index: 0,
                message: { role: 'assistant', content: text, refusal: null, annotations: [] },
                logprobs: null,
                finish_reason: 'stop',
              },
            ],
            usage: {
              prompt_tokens: usage.input,
              completion_tokens: usage.output,
              total_tokens: usage.input + usage.output,
              prompt_tokens_details: { cached_tokens: 0, audio_tokens: 0 },
              completion_tokens_details: { reasoning_tokens: 0, audio_tokens: 0 },
            },
            service_tier: 'default',
            system_fingerprint: null,
          };
    return { ...base, response: { status_code: 200, request_id: requestId, body }, error: null };
  }

  private anthropicLine(b: FakeBatch, line: Line, outcome: Outcome | undefined, pad: number): unknown {
    const base = { custom_id: line.customId };
    if (!outcome) return { ...base, result: { type: b.endReason === 'cancelled' ? 'canceled' : 'expired' } };
    if (outcome.kind !== 'succeeded') {
      const type =
        outcome.kind === 'errored' ? (outcome.type ?? anthropicErrorType(outcome.status)) : anthropicErrorType(500);
      return {
        ...base,
        result: {
          type: 'errored',
          error: { type: 'error', error: { type, message: outcome.message }, request_id: `req_${b.seq}_${line.index}` },
        },
      };
    }
    const usage = this.usageOf(line, outcome.text);
    return {
      ...base,
      result: {
        type: 'succeeded',
        message: {
          id: `msg_${b.id.slice(9, 21)}${String(line.index).padStart(6, '0')}`,
          type: 'message',
          role: 'assistant',
          model: String(line.body.model ?? 'fake'),
          content: [{ type: 'text', text: outcome.text + ' '.repeat(pad), citations: null }],
          stop_reason: 'end_turn',
          stop_sequence: null,
          stop_details: null,
          container: null,
          usage: {
            input_tokens: usage.input,
            output_tokens: usage.output,
            cache_creation_input_tokens: 0,
            cache_read_input_tokens: 0,
            cache_creation: null,
            server_tool_use: null,
            service_tier: 'batch',
          },
        },
      },
    };
  }

  /** The lines of a generated file (OpenAI output or error file, Anthropic results), made one at a time. */
  private *fileLines(b: FakeBatch, which: 'output' | 'error' | 'results'): Generator<string> {
    const pad = this.padTarget(b);
    for (const index of b.fileOrder) {
      const line = b.lines[index];
      if (which !== 'results') {
        const succeeded = b.doneMask?.[index] === 1 && this.outcome(b, line).kind === 'succeeded';
        if (succeeded !== (which === 'output')) continue;
      }
      yield this.resultLine(b, line, pad);
    }
  }

  private fileBytes(file: StoredFile): number {
    if (file.content) return file.content.length;
    if (file.bytes === undefined) {
      let bytes = 0;
      for (const line of this.fileLines(file.batch!, file.which!)) bytes += Buffer.byteLength(line);
      file.bytes = bytes;
    }
    return file.bytes;
  }

  // ---- HTTP ----------------------------------------------------------------------------------------------------

  private route(
    method: string,
    path: string,
  ): { provider: BatchProvider; kind: BatchRequestKind; target?: string; serve: RouteHandler } {
    let m: RegExpExecArray | null;
    if (path.startsWith('/v1/messages/batches')) {
      const provider = 'anthropic';
      if (path === '/v1/messages/batches') {
        if (method === 'POST') return { provider, kind: 'create', serve: (r) => this.anthropicCreate(r) };
        if (method === 'GET') return { provider, kind: 'list', serve: (r) => this.anthropicList(r) };
      }
      if ((m = /^\/v1\/messages\/batches\/([^/]+)$/.exec(path))) {
        const id = m[1];
        if (method === 'GET') return { provider, kind: 'retrieve', target: id, serve: () => this.anthropicGet(id) };
        if (method === 'DELETE') return { provider, kind: 'delete', target: id, serve: () => this.anthropicDelete(id) };
      }
      if ((m = /^\/v1\/messages\/batches\/([^/]+)\/cancel$/.exec(path)) && method === 'POST') {
        const id = m[1];
        return { provider, kind: 'cancel', target: id, serve: () => this.cancel('anthropic', id) };
      }
      if ((m = /^\/v1\/messages\/batches\/([^/]+)\/results$/.exec(path)) && method === 'GET') {
        const id = m[1];
        return { provider, kind: 'results', target: id, serve: () => this.anthropicResults(id) };
      }
      return { provider, kind: 'other', serve: () => this.notFound('anthropic', method, path) };
    }
    const provider = 'openai';
    if (path === '/v1/files' && method === 'POST') return { provider, kind: 'upload', serve: (r) => this.upload(r) };
    if ((m = /^\/v1\/files\/([^/]+)$/.exec(path))) {
      const id = m[1];
      if (method === 'GET') return { provider, kind: 'file', target: id, serve: () => this.fileObject(id) };
      if (method === 'DELETE') return { provider, kind: 'delete', target: id, serve: () => this.fileDelete(id) };
    }
    if ((m = /^\/v1\/files\/([^/]+)\/content$/.exec(path)) && method === 'GET') {
      const id = m[1];
      return { provider, kind: 'results', target: id, serve: () => this.fileContent(id) };
    }
    if (path === '/v1/batches') {
      if (method === 'POST') return { provider, kind: 'create', serve: (r) => this.openaiCreate(r) };
      if (method === 'GET') return { provider, kind: 'list', serve: (r) => this.openaiList(r) };
    }
    if ((m = /^\/v1\/batches\/([^/]+)$/.exec(path)) && method === 'GET') {
      const id = m[1];
      return { provider, kind: 'retrieve', target: id, serve: () => this.openaiGet(id) };
    }
    if ((m = /^\/v1\/batches\/([^/]+)\/cancel$/.exec(path)) && method === 'POST') {
      const id = m[1];
      return { provider, kind: 'cancel', target: id, serve: () => this.cancel('openai', id) };
    }
    return { provider, kind: 'other', serve: () => this.notFound('openai', method, path) };
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const method = req.method ?? 'GET';
    const url = new URL(req.url ?? '/', 'http://fake');
    const route = this.route(method, url.pathname);
    const call: BatchCall = {
      provider: route.provider,
      kind: route.kind,
      method,
      path: url.pathname,
      target: route.target,
      at: Date.now(),
      idempotencyKey: typeof req.headers['idempotency-key'] === 'string' ? req.headers['idempotency-key'] : undefined,
    };
    this.log.push(call);
    this.calls[route.provider][route.kind]++;
    const queue = this.faults.get(`${route.provider}:${route.kind}`);
    const fault = queue?.shift();
    try {
      if (fault && 'hang' in fault) return void req.resume();
      if (fault && 'reset' in fault) return void req.socket.destroy();
      if (fault && 'status' in fault) {
        req.resume();
        const body =
          fault.body ??
          (route.provider === 'openai'
            ? openaiError(`scripted ${fault.status}`, openaiErrorType(fault.status))
            : anthropicError(anthropicErrorType(fault.status), `scripted ${fault.status}`));
        return this.send(res, call, { status: fault.status, json: body, headers: fault.headers });
      }
      const denied = this.authenticate(route.provider, req);
      if (denied) {
        req.resume();
        return this.send(res, call, denied);
      }
      const reply = await route.serve({ req, url });
      if (fault && 'lostAnswer' in fault) {
        if (fault.lostAnswer === 'reset') req.socket.destroy();
        return;
      }
      await this.send(res, call, reply);
    } catch (error) {
      if (res.headersSent) return void res.destroy();
      const message = error instanceof Error ? error.message : String(error);
      await this.send(res, call, {
        status: 500,
        json: route.provider === 'openai' ? openaiError(message, 'server_error') : anthropicError('api_error', message),
      });
    }
  }

  private authenticate(provider: BatchProvider, req: IncomingMessage): Reply | undefined {
    const bearer = /^Bearer \S+/.test(req.headers.authorization ?? '');
    if (provider === 'openai' && !bearer) {
      return {
        status: 401,
        json: openaiError("You didn't provide an API key.", 'invalid_request_error', null, 'missing_api_key'),
      };
    }
    if (provider === 'anthropic' && !req.headers['x-api-key'] && !bearer) {
      return { status: 401, json: anthropicError('authentication_error', 'x-api-key header is required') };
    }
    return undefined;
  }

  private async send(res: ServerResponse, call: BatchCall, reply: Reply): Promise<void> {
    call.status = reply.status;
    const requestIdHeader = call.provider === 'openai' ? 'x-request-id' : 'request-id';
    const requestId = `req_${this.log.length}`;
    if ('json' in reply) {
      res.writeHead(reply.status, {
        'content-type': 'application/json',
        [requestIdHeader]: requestId,
        ...reply.headers,
      });
      res.end(JSON.stringify(reply.json));
      return;
    }
    res.writeHead(reply.status, { 'content-type': reply.contentType, [requestIdHeader]: requestId });
    call.bytesWritten = 0;
    call.maxBuffered = 0;
    let chunk = '';
    const flush = async () => {
      const bytes = Buffer.byteLength(chunk);
      const more = res.write(chunk);
      call.bytesWritten! += bytes;
      chunk = '';
      call.maxBuffered = Math.max(call.maxBuffered!, res.writableLength);
      if (!more && !res.destroyed) {
        await new Promise<void>((resolve) => {
          const go = () => {
            res.off('drain', go);
            res.off('close', go);
            resolve();
          };
          res.on('drain', go);
          res.on('close', go);
        });
      }
    };
    for (const line of reply.lines) {
      if (res.destroyed) return;
      chunk += line;
      if (chunk.length >= 65_536) await flush();
    }
    if (res.destroyed) return;
    if (chunk) await flush();
    call.endedAt = Date.now();
    res.end();
  }

  private notFound(provider: BatchProvider, method: string, path: string): Reply {
    return provider === 'openai'
      ? { status: 404, json: openaiError(`Invalid URL (${method} ${path})`) }
      : { status: 404, json: anthropicError('not_found_error', `Not found: ${method} ${path}`) };
  }

  private async jsonBody(req: IncomingMessage): Promise<{ raw: number; body: Record<string, unknown> } | undefined> {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const raw = Buffer.concat(chunks);
    try {
      const body = raw.length ? JSON.parse(raw.toString('utf8')) : {};
      return body && typeof body === 'object' && !Array.isArray(body) ? { raw: raw.length, body } : undefined;
    } catch {
      return undefined;
    }
  }

  private resolveScript(provider: BatchProvider, seq: number): ResolvedScript {
    const s = { ...DEFAULT_SCRIPT, ...this.defaults, ...this.scripts[provider].shift() };
    return {
      validatingMs: provider === 'openai' ? s.validatingMs : 0,
      inProgressMs: s.inProgressMs,
      finalizingMs: s.finalizingMs,
      cancellingMs: s.cancellingMs,
      windowMs: s.windowMs,
      expireAfterLines: s.expireAfterLines,
      fail: provider === 'openai' ? s.fail : undefined,
      outputBytes: s.outputBytes,
      seed: s.seed ?? seq,
      shuffle: s.shuffle,
    };
  }

  private newBatch(
    provider: BatchProvider,
    id: string,
    lines: Line[],
    more: Pick<FakeBatch, 'endpoint' | 'inputFileId' | 'metadata' | 'model' | 'validationErrors'>,
  ): FakeBatch {
    const seq = ++this.seq;
    const script = this.resolveScript(provider, seq);
    const now = Date.now();
    const b: FakeBatch = {
      provider,
      id,
      seq,
      createdAt: now,
      script,
      phase: provider === 'openai' ? 'validating' : 'in_progress',
      phaseAt: now,
      times: provider === 'openai' ? {} : { in_progress: now },
      lines,
      order: shuffled(lines.length, script.seed, script.shuffle),
      fileOrder: shuffled(lines.length, script.seed ^ 0x9e3779b9, script.shuffle),
      done: 0,
      retrieves: [],
      cancels: 0,
      rules: [...this.rules],
      responder: this.responder,
      ...more,
    };
    this.batchesById.set(id, b);
    this.tick(b, now);
    return b;
  }

  // ---- OpenAI: files -------------------------------------------------------------------------------------------

  private fileView(file: StoredFile): Record<string, unknown> {
    return {
      id: file.id,
      object: 'file',
      bytes: this.fileBytes(file),
      created_at: seconds(file.createdAt),
      expires_at: seconds(file.createdAt + 30 * DAY_MS),
      filename: file.filename,
      purpose: file.purpose,
      status: 'processed',
      status_details: null,
    };
  }

  /** `POST /v1/files`, multipart (`file`, `purpose`), parsed by the platform's own `Request.formData()`. */
  private async upload({ req, url }: RouteArgs): Promise<Reply> {
    const headers = new Headers();
    for (const [k, v] of Object.entries(req.headers)) if (typeof v === 'string') headers.set(k, v);
    let form: FormData;
    try {
      form = await new Request(url, {
        method: 'POST',
        headers,
        body: Readable.toWeb(req) as ReadableStream,
        duplex: 'half',
      } as RequestInit).formData();
    } catch {
      return { status: 400, json: openaiError('The request is not valid multipart/form-data.') };
    }
    const purpose = form.get('purpose');
    const file = form.get('file');
    if (typeof purpose !== 'string') {
      return { status: 400, json: openaiError("Missing required parameter: 'purpose'.", undefined, 'purpose') };
    }
    if (!file || typeof file === 'string') {
      return { status: 400, json: openaiError("Missing required parameter: 'file'.", undefined, 'file') };
    }
    const content = Buffer.from(await file.arrayBuffer());
    if (purpose === 'batch' && !file.name.endsWith('.jsonl')) {
      return { status: 400, json: openaiError('Batch input files must be .jsonl.', undefined, 'file') };
    }
    if (purpose === 'batch' && content.length > this.limits.openaiMaxBytes) {
      return {
        status: 400,
        json: openaiError(`File is larger than ${this.limits.openaiMaxBytes} bytes.`, undefined, 'file'),
      };
    }
    const stored: StoredFile = {
      id: `file-${randomBytes(12).toString('hex')}`,
      purpose,
      filename: file.name,
      createdAt: Date.now(),
      content,
    };
    this.files.set(stored.id, stored);
    return { status: 200, json: this.fileView(stored) };
  }

  private missingFile(id: string): Reply {
    return { status: 404, json: openaiError(`No such File object: ${id}`, undefined, 'id') };
  }

  private fileObject(id: string): Reply {
    const file = this.files.get(id);
    return file ? { status: 200, json: this.fileView(file) } : this.missingFile(id);
  }

  private fileDelete(id: string): Reply {
    if (!this.files.delete(id)) return this.missingFile(id);
    return { status: 200, json: { id, object: 'file', deleted: true } };
  }

  /** `GET /v1/files/{id}/content`: an upload as it came, or a batch's output or error file made line by line. */
  private fileContent(id: string): Reply {
    const file = this.files.get(id);
    if (!file) return this.missingFile(id);
    const contentType = 'application/octet-stream';
    if (file.content) return { status: 200, lines: [file.content.toString('utf8')], contentType };
    return { status: 200, lines: this.fileLines(file.batch!, file.which!), contentType };
  }

  // ---- OpenAI: batches -----------------------------------------------------------------------------------------

  private async openaiCreate({ req }: RouteArgs): Promise<Reply> {
    const parsed = await this.jsonBody(req);
    if (!parsed) return { status: 400, json: openaiError('We could not parse the JSON body of your request.') };
    const { input_file_id: inputFileId, endpoint, completion_window: window, metadata } = parsed.body;
    if (typeof inputFileId !== 'string') {
      return {
        status: 400,
        json: openaiError("Missing required parameter: 'input_file_id'.", undefined, 'input_file_id'),
      };
    }
    if (typeof endpoint !== 'string' || !OPENAI_ENDPOINTS.includes(endpoint)) {
      return {
        status: 400,
        json: openaiError(`The fake serves ${OPENAI_ENDPOINTS.join(' and ')} batches.`, undefined, 'endpoint'),
      };
    }
    if (window !== '24h') {
      return { status: 400, json: openaiError("completion_window must be '24h'.", undefined, 'completion_window') };
    }
    const meta = this.checkMetadata(metadata);
    if (typeof meta === 'string') return { status: 400, json: openaiError(meta, undefined, 'metadata') };
    const file = this.files.get(inputFileId);
    if (!file?.content) {
      return { status: 400, json: openaiError(`No such File object: ${inputFileId}`, undefined, 'input_file_id') };
    }
    if (file.purpose !== 'batch') {
      return {
        status: 400,
        json: openaiError("The input file's purpose must be 'batch'.", undefined, 'input_file_id'),
      };
    }
    const { lines, errors, model } = this.parseInput(file.content, endpoint);
    const b = this.newBatch('openai', `batch_${randomBytes(12).toString('hex')}`, lines, {
      endpoint,
      inputFileId,
      metadata: meta,
      model,
      validationErrors: errors,
    });
    return { status: 200, json: this.openaiView(b) };
  }

  private checkMetadata(metadata: unknown): Record<string, string> | null | string {
    if (metadata === undefined || metadata === null) return null;
    if (typeof metadata !== 'object' || Array.isArray(metadata)) return 'metadata must be an object.';
    const entries = Object.entries(metadata);
    if (entries.length > 16) return 'metadata has more than 16 keys.';
    for (const [k, v] of entries) {
      if (k.length > 64 || typeof v !== 'string' || v.length > 512) {
        return 'metadata keys are at most 64 characters, values strings of at most 512.';
      }
    }
    return metadata as Record<string, string>;
  }

  /**
   * The input file's lines, and what fails its validation (the error codes are the fake's own: the reference does
   * not list them): a line that is not JSON, without a `custom_id` or with one seen before, a method other than
   * POST, a `url` other than the batch's endpoint, a `body` that is not an object, a second model, too many lines.
   */
  private parseInput(
    content: Buffer,
    endpoint: string,
  ): { lines: Line[]; errors: FakeBatch['validationErrors']; model: string | null } {
    const lines: Line[] = [];
    const errors: FakeBatch['validationErrors'] = [];
    const ids = new Set<string>();
    let model: string | null = null;
    const error = (code: string, message: string, line: number, param: string | null = null) => {
      if (errors.length < 100) errors.push({ code, message, param, line });
    };
    const texts = content.toString('utf8').split('\n');
    texts.forEach((text, i) => {
      const number = i + 1;
      if (!text.trim()) return;
      let parsed: Record<string, unknown>;
      try {
        parsed = JSON.parse(text);
      } catch {
        return error('invalid_json_line', `Line ${number} is not valid JSON.`, number);
      }
      const { custom_id: customId, method, url, body } = parsed;
      if (typeof customId !== 'string' || !customId) {
        return error('missing_required_parameter', 'custom_id is required.', number, 'custom_id');
      }
      if (ids.has(customId)) {
        return error('duplicate_custom_id', `custom_id '${customId}' is not unique.`, number, 'custom_id');
      }
      ids.add(customId);
      if (method !== 'POST') return error('invalid_method', 'method must be POST.', number, 'method');
      if (url !== endpoint) {
        return error(
          'mismatched_endpoint',
          `url ${String(url)} is not the batch's endpoint ${endpoint}.`,
          number,
          'url',
        );
      }
      if (!body || typeof body !== 'object' || Array.isArray(body)) {
        return error('missing_required_parameter', 'body must be an object.', number, 'body');
      }
      const lineModel = String((body as Record<string, unknown>).model ?? '');
      if (model !== null && lineModel !== model) {
        return error('mismatched_model', 'Every line of a batch must use the same model.', number, 'body.model');
      }
      model = lineModel;
      lines.push({ index: lines.length, customId, body: body as Record<string, unknown> });
    });
    if (lines.length === 0 && errors.length === 0) error('empty_file', 'The input file has no requests.', 0);
    if (lines.length > this.limits.openaiMaxRequests) {
      error('too_many_requests', `A batch has at most ${this.limits.openaiMaxRequests} requests.`, 0);
    }
    return { lines, errors, model };
  }

  private openaiView(b: FakeBatch): Record<string, unknown> {
    const t = b.times;
    const ended = b.phase === 'ended';
    let counts = { total: 0, completed: 0, failed: 0 };
    if (b.phase !== 'validating' && b.endReason !== 'failed') {
      const tally = this.tally(b);
      // Ended: every line is in one of the two files, and the counts are their lines (lines that did not run, in
      // the error file as `batch_expired` or `batch_cancelled`, count as failed: the fake's choice).
      counts = {
        total: b.lines.length,
        completed: tally.succeeded,
        failed: tally.errored + (ended ? tally.notDone : 0),
      };
    }
    let usage = { input: 0, output: 0 };
    if (ended && b.doneMask) {
      for (const line of b.lines) {
        if (!b.doneMask[line.index]) continue;
        const outcome = this.outcome(b, line);
        if (outcome.kind !== 'succeeded') continue;
        const u = this.usageOf(line, outcome.text);
        usage = { input: usage.input + u.input, output: usage.output + u.output };
      }
    }
    return {
      id: b.id,
      object: 'batch',
      endpoint: b.endpoint,
      model: b.model,
      errors:
        b.validationErrors.length && b.endReason === 'failed' ? { object: 'list', data: b.validationErrors } : null,
      input_file_id: b.inputFileId,
      completion_window: '24h',
      status: this.statusOf(b),
      output_file_id: b.outputFileId ?? null,
      error_file_id: b.errorFileId ?? null,
      created_at: seconds(b.createdAt),
      in_progress_at: seconds(t.in_progress),
      expires_at: seconds(b.createdAt + b.script.windowMs),
      finalizing_at: seconds(t.finalizing),
      completed_at: seconds(t.completed),
      failed_at: seconds(t.failed),
      expired_at: seconds(t.expired),
      cancelling_at: seconds(t.cancelling),
      cancelled_at: seconds(t.cancelled),
      request_counts: counts,
      usage: {
        input_tokens: usage.input,
        input_tokens_details: { cached_tokens: 0 },
        output_tokens: usage.output,
        output_tokens_details: { reasoning_tokens: 0 },
        total_tokens: usage.input + usage.output,
      },
      metadata: b.metadata,
    };
  }

  private openaiGet(id: string): Reply {
    const b = this.batchesById.get(id);
    if (!b || b.provider !== 'openai') {
      return { status: 404, json: openaiError(`No batch found with id '${id}'.`) };
    }
    b.retrieves.push(Date.now());
    this.tick(b, Date.now());
    return { status: 200, json: this.openaiView(b) };
  }

  /** Newest first; `after` is the id of the last batch of the page before, `limit` 1-100 (20). */
  private openaiList({ url }: RouteArgs): Reply {
    const all = this.batches('openai').reverse();
    const after = url.searchParams.get('after');
    const limit = Math.min(100, Math.max(1, Number(url.searchParams.get('limit') ?? 20) || 20));
    const start = after ? all.findIndex((b) => b.id === after) + 1 : 0;
    const page = all.slice(start, start + limit);
    return {
      status: 200,
      json: {
        object: 'list',
        data: page.map((b) => this.openaiView(b)),
        first_id: page[0]?.id ?? null,
        last_id: page.at(-1)?.id ?? null,
        has_more: start + limit < all.length,
      },
    };
  }

  /**
   * `POST .../cancel` of either provider: a live batch goes to `cancelling` (Anthropic `canceling`) and then ends
   * with the lines done by the cancel; a cancel of a batch already cancelling or cancelled answers it as it is; one of
   * a batch that ended otherwise is a 400 (the fake's choice: the references do not say).
   */
  private cancel(provider: BatchProvider, id: string): Reply {
    const b = this.batchesById.get(id);
    if (!b || b.provider !== provider) {
      return provider === 'openai'
        ? { status: 404, json: openaiError(`No batch found with id '${id}'.`) }
        : { status: 404, json: anthropicError('not_found_error', `No batch found with id '${id}'.`) };
    }
    const now = Date.now();
    this.tick(b, now);
    b.cancels++;
    const view = () => (provider === 'openai' ? this.openaiView(b) : this.anthropicView(b));
    if (b.phase === 'cancelling' || b.endReason === 'cancelled') return { status: 200, json: view() };
    if (b.phase === 'ended') {
      const message = `Cannot cancel a batch with status '${this.statusOf(b)}'.`;
      return provider === 'openai'
        ? { status: 400, json: openaiError(message) }
        : { status: 400, json: anthropicError('invalid_request_error', message) };
    }
    this.enter(b, 'cancelling', now);
    this.tick(b, now);
    return { status: 200, json: view() };
  }

  // ---- Anthropic -----------------------------------------------------------------------------------------------

  private async anthropicCreate({ req }: RouteArgs): Promise<Reply> {
    const parsed = await this.jsonBody(req);
    const bad = (message: string) => ({ status: 400, json: anthropicError('invalid_request_error', message) });
    if (!parsed) return bad('The request body is not valid JSON.');
    if (parsed.raw > this.limits.anthropicMaxBytes) {
      return {
        status: 413,
        json: anthropicError('request_too_large', `A batch is at most ${this.limits.anthropicMaxBytes} bytes.`),
      };
    }
    const requests = parsed.body.requests;
    if (!Array.isArray(requests) || requests.length === 0) return bad('requests: at least one request is required');
    if (requests.length > this.limits.anthropicMaxRequests) {
      return bad(`requests: at most ${this.limits.anthropicMaxRequests} requests`);
    }
    const ids = new Set<string>();
    const lines: Line[] = [];
    for (const [i, r] of (requests as Array<Record<string, unknown>>).entries()) {
      const customId = r?.custom_id;
      if (typeof customId !== 'string' || !/^[a-zA-Z0-9_-]{1,64}$/.test(customId)) {
        return bad(`requests.${i}.custom_id: String should match pattern '^[a-zA-Z0-9_-]{1,64}$'`);
      }
      if (ids.has(customId)) return bad(`requests.${i}.custom_id: Duplicate custom_id '${customId}'`);
      ids.add(customId);
      const params = r.params;
      if (!params || typeof params !== 'object' || Array.isArray(params)) return bad(`requests.${i}.params: required`);
      const p = params as Record<string, unknown>;
      // Params are validated as each request runs: a bad one is an `errored` line, not a refused batch.
      const missing = ['model', 'max_tokens', 'messages'].find((k) => p[k] === undefined);
      lines.push({
        index: i,
        customId,
        body: p,
        invalid: missing ? `${missing}: Field required` : undefined,
      });
    }
    const b = this.newBatch('anthropic', `msgbatch_${randomBytes(12).toString('hex')}`, lines, {
      endpoint: '/v1/messages',
      metadata: null,
      model: null,
      validationErrors: [],
    });
    return { status: 200, json: this.anthropicView(b) };
  }

  private anthropicView(b: FakeBatch): Record<string, unknown> {
    const ended = b.phase === 'ended';
    const tally = this.tally(b);
    // Requests count as `processing` until the whole batch has ended (the reference: they move when it ends).
    const counts = ended
      ? {
          processing: 0,
          succeeded: tally.succeeded,
          errored: tally.errored,
          canceled: b.endReason === 'cancelled' ? tally.notDone : 0,
          expired: b.endReason === 'expired' ? tally.notDone : 0,
        }
      : { processing: b.lines.length, succeeded: 0, errored: 0, canceled: 0, expired: 0 };
    return {
      id: b.id,
      type: 'message_batch',
      processing_status: this.statusOf(b),
      request_counts: counts,
      ended_at: ended ? iso(b.phaseAt) : null,
      created_at: iso(b.createdAt),
      expires_at: iso(b.createdAt + b.script.windowMs),
      archived_at: null,
      cancel_initiated_at: iso(b.times.cancelling),
      results_url: ended ? `${this.url}/v1/messages/batches/${b.id}/results` : null,
    };
  }

  private anthropicGet(id: string): Reply {
    const b = this.batchesById.get(id);
    if (!b || b.provider !== 'anthropic') {
      return { status: 404, json: anthropicError('not_found_error', `No batch found with id '${id}'.`) };
    }
    b.retrieves.push(Date.now());
    this.tick(b, Date.now());
    return { status: 200, json: this.anthropicView(b) };
  }

  /** Newest first; `after_id` / `before_id` page from a batch's id, `limit` 1-1000 (20). */
  private anthropicList({ url }: RouteArgs): Reply {
    const all = this.batches('anthropic').reverse();
    const afterId = url.searchParams.get('after_id');
    const beforeId = url.searchParams.get('before_id');
    const limit = Math.min(1000, Math.max(1, Number(url.searchParams.get('limit') ?? 20) || 20));
    let start = 0;
    let end = Math.min(all.length, limit);
    if (afterId) {
      start = all.findIndex((b) => b.id === afterId) + 1;
      end = Math.min(all.length, start + limit);
    } else if (beforeId) {
      end = Math.max(
        0,
        all.findIndex((b) => b.id === beforeId),
      );
      start = Math.max(0, end - limit);
    }
    const page = all.slice(start, end);
    return {
      status: 200,
      json: {
        data: page.map((b) => this.anthropicView(b)),
        has_more: beforeId ? start > 0 : end < all.length,
        first_id: page[0]?.id ?? null,
        last_id: page.at(-1)?.id ?? null,
      },
    };
  }

  private anthropicDelete(id: string): Reply {
    const b = this.batchesById.get(id);
    if (!b || b.provider !== 'anthropic') {
      return { status: 404, json: anthropicError('not_found_error', `No batch found with id '${id}'.`) };
    }
    this.tick(b, Date.now());
    if (b.phase !== 'ended') {
      return { status: 400, json: anthropicError('invalid_request_error', 'A batch must end before it is deleted.') };
    }
    this.batchesById.delete(id);
    return { status: 200, json: { id, type: 'message_batch_deleted' } };
  }

  /** `results_url`: one line per request, `succeeded` / `errored` / `canceled` / `expired`, in arbitrary order. */
  private anthropicResults(id: string): Reply {
    const b = this.batchesById.get(id);
    if (!b || b.provider !== 'anthropic') {
      return { status: 404, json: anthropicError('not_found_error', `No batch found with id '${id}'.`) };
    }
    this.tick(b, Date.now());
    if (b.phase !== 'ended') {
      return { status: 400, json: anthropicError('invalid_request_error', `Batch ${id} has not ended yet.`) };
    }
    return { status: 200, lines: this.fileLines(b, 'results'), contentType: 'application/binary' };
  }
}

interface RouteArgs {
  req: IncomingMessage;
  url: URL;
}

type RouteHandler = (args: RouteArgs) => Reply | Promise<Reply>;
