import { randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';

/** What the fake answers to one request. */
export type Script =
  | { kind: 'json'; content: unknown; delayMs?: number }
  | { kind: 'text'; content: string; delayMs?: number }
  | { kind: 'status'; status: number; delayMs?: number; body?: unknown; headers?: Record<string, string> }
  | { kind: 'hang' }
  | { kind: 'reset' }
  /** 200 and its headers at once, then one byte of the body every `intervalMs` (1 s), never ending. */
  | { kind: 'drip'; intervalMs?: number }
  /** A valid completion whose summary is `bytes` long, written in 64 KiB chunks, without a Content-Length. */
  | { kind: 'large'; bytes: number };

export interface SeenRequest {
  method: string;
  /** The URL's path, without its query. */
  path: string;
  headers: IncomingMessage['headers'];
  body: Record<string, unknown>;
  /** Date.now() when the request's body had arrived. */
  at: number;
  /** Date.now() when the answer was written (undefined while serving, for a hang, or a reset). */
  answeredAt?: number;
  /** The HTTP status answered. */
  status?: number;
  /** Date.now() when the connection of this request closed (the client cut it off, or the answer ended). */
  closedAt?: number;
  /** Body bytes handed to the socket for a `large` or `drip` answer. */
  bytesWritten?: number;
}

const DEFAULT: Script = { kind: 'json', content: { summary: 'fine' } };

/**
 * How one background response of `POST /v1/responses` goes: queued at once, `in_progress` from a fifth of
 * `afterMs`, then its end at `afterMs`: `completed` with `content` (JSON-encoded into the output text), `failed`
 * (`server_error`) or `incomplete` (`max_output_tokens`). `ignoreCancel`: a cancel answers with the response as it
 * is and the response still ends as scripted (a cancel that came too late to stop it). `createStatus`: the create
 * call answers that error instead; `hangCreate`: it never answers.
 */
export interface BackgroundScript {
  afterMs: number;
  outcome?: 'completed' | 'failed' | 'incomplete';
  content?: unknown;
  ignoreCancel?: boolean;
  /** The cancel comes too late: the response ends (as scripted) as the cancel arrives, which answers it ended. */
  endOnCancel?: boolean;
  /** A cancel is answered 200 and its headers, then its body never comes (the response goes on as scripted). */
  stallCancel?: boolean;
  createStatus?: number;
  hangCreate?: boolean;
}

interface StoredResponse {
  id: string;
  createdAt: number;
  script: BackgroundScript;
  body: Record<string, unknown>;
  cancelledAt?: number;
  /** When it ended before its time (`endOnCancel`). */
  endedAt?: number;
  /** Retrieve times (Date.now()), for the look-up bound. */
  retrieves: number[];
  cancels: number;
}

/** OpenAI's error body: `{error: {message, type, param, code}}`. */
const apiError = (message: string, type = 'invalid_request_error', code: string | null = null) => ({
  error: { message, type, param: null, code },
});

/**
 * A real OpenAI-compatible chat-completions server on 127.0.0.1, answering from a script: the adapter tests
 * talk to it through the official SDK, over HTTP, so nothing of the SDK is mocked. It also measures what a
 * provider's rate limiter would see (how many requests it serves at once, when each arrived), for the capacity
 * tests and `npm run bench -- --cases capacity`. It lives in bench/ so that both can import it (dist/bench is
 * compiled from bench/ only).
 */
export class FakeOpenAiServer {
  readonly requests: SeenRequest[] = [];
  /** Requests being served now: arrived and neither answered nor cut off by the client. */
  inFlight = 0;
  /** The most requests served at once since start or the last `resetPeak()`. */
  maxInFlight = 0;
  private readonly scripts: Script[] = [];
  private fallback: Script = DEFAULT;
  private failing?: number;
  private latency = 0;
  private readonly sockets = new Set<Socket>();
  private server?: Server;
  url = '';
  /** The background responses created, by id (OpenAI's Responses API, background mode). */
  readonly responses = new Map<string, StoredResponse>();
  /** Requests to the Responses endpoints, counted. */
  readonly counters = { creates: 0, retrieves: 0, cancels: 0, lists: 0 };
  /** Chat completions made with `store: true`, as `GET /v1/chat/completions` lists them. */
  readonly stored: Array<Record<string, unknown>> = [];
  private readonly backgroundScripts: BackgroundScript[] = [];
  private backgroundFallback: BackgroundScript = { afterMs: 50 };
  /** How long a response can be retrieved; past it, 404 (OpenAI keeps background responses about 10 minutes). */
  retentionMs = 600_000;

  async start(): Promise<this> {
    this.server = createServer((req, res) => void this.handle(req, res));
    // A bench's 50+ simultaneous calls from several processes: no per-socket request limit, no keep-alive cut.
    this.server.keepAliveTimeout = 30_000;
    this.server.on('connection', (socket) => {
      this.sockets.add(socket);
      socket.on('close', () => this.sockets.delete(socket));
    });
    await new Promise<void>((resolve) => this.server!.listen(0, '127.0.0.1', 511, resolve));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}/v1`;
    return this;
  }

  /** Queues answers for the next requests, in order; after them, `always` (default: a valid summary). */
  script(...scripts: Script[]): this {
    this.scripts.push(...scripts);
    return this;
  }

  always(script: Script): this {
    this.fallback = script;
    return this;
  }

  /** Queues how the next background responses go, in order; after them, `alwaysBackground` (default: done in 50 ms). */
  background(...scripts: BackgroundScript[]): this {
    this.backgroundScripts.push(...scripts);
    return this;
  }

  alwaysBackground(script: BackgroundScript): this {
    this.backgroundFallback = script;
    return this;
  }

  /** The response created for an attempt (the adapter sends its id as `metadata.onejob_attempt`). */
  responseOf(attemptId: string): StoredResponse | undefined {
    return [...this.responses.values()].find(
      (r) => (r.body.metadata as Record<string, string> | undefined)?.onejob_attempt === attemptId,
    );
  }

  /** Every request waits this long before its answer (on top of a script's own `delayMs`). */
  latencyMs(ms: number): this {
    this.latency = ms;
    return this;
  }

  /** A sick provider: every request, scripted or not, is answered with `status` (after the latency) until `recover()`. */
  failAll(status = 500): this {
    this.failing = status;
    return this;
  }

  recover(): this {
    this.failing = undefined;
    return this;
  }

  /** Starts a new peak measurement from the requests being served now. */
  resetPeak(): void {
    this.maxInFlight = this.inFlight;
  }

  /** Arrival times (Date.now()) of the requests so far, in order of arrival. */
  arrivals(): number[] {
    return this.requests.map((r) => r.at);
  }

  reset(): void {
    this.requests.length = 0;
    this.scripts.length = 0;
    this.fallback = DEFAULT;
    this.failing = undefined;
    this.latency = 0;
    this.maxInFlight = this.inFlight;
    this.responses.clear();
    this.backgroundScripts.length = 0;
    this.backgroundFallback = { afterMs: 50 };
    this.retentionMs = 600_000;
    Object.assign(this.counters, { creates: 0, retrieves: 0, cancels: 0, lists: 0 });
    this.stored.length = 0;
  }

  async stop(): Promise<void> {
    for (const socket of this.sockets) socket.destroy();
    await new Promise<void>((resolve) => this.server?.close(() => resolve()) ?? resolve());
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    let raw = '';
    for await (const chunk of req) raw += chunk;
    const method = req.method ?? 'GET';
    const path = (req.url ?? '').split('?')[0];
    const seen: SeenRequest = { method, path, headers: req.headers, body: raw ? JSON.parse(raw) : {}, at: Date.now() };
    this.requests.push(seen);
    const number = this.requests.length;
    // Served until answered or until the client goes away (a SIGKILLed worker's calls stop counting at once).
    let open = true;
    const done = () => {
      if (!open) return;
      open = false;
      this.inFlight--;
    };
    this.inFlight++;
    this.maxInFlight = Math.max(this.maxInFlight, this.inFlight);
    res.on('close', () => {
      seen.closedAt = Date.now();
      done();
    });
    if (path.startsWith('/v1/responses')) {
      await this.handleResponses(method, path, seen, res, done);
      return;
    }
    if (method === 'GET' && path === '/v1/chat/completions') {
      this.listStored(new URL(req.url ?? '', 'http://fake').searchParams, seen, res, done);
      return;
    }
    const script: Script =
      this.failing !== undefined ? { kind: 'status', status: this.failing } : (this.scripts.shift() ?? this.fallback);
    if (script.kind === 'hang') return;
    const delay = this.latency + ('delayMs' in script && script.delayMs ? script.delayMs : 0);
    if (delay) await new Promise((r) => setTimeout(r, delay));
    // `store: true`: the completion is stored when it is made, whether or not its client is still there to read it.
    if (seen.body.store === true && (script.kind === 'json' || script.kind === 'text')) {
      const content = script.kind === 'json' ? JSON.stringify(script.content) : script.content;
      this.stored.push({ ...this.completion(`chatcmpl-${number}`, content), metadata: seen.body.metadata ?? {} });
    }
    if (!open) return;
    seen.answeredAt = Date.now();
    if (script.kind === 'reset') {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.write('{"id":"chatcmpl-partial","choices":[{"message":{"content":"{\\"sum');
      setTimeout(() => res.socket?.destroy(), 5);
      return;
    }
    if (script.kind === 'drip') {
      seen.status = 200;
      res.writeHead(200, { 'content-type': 'application/json', 'x-request-id': `req_${number}` });
      res.write('{');
      seen.bytesWritten = 1;
      const timer = setInterval(() => {
        res.write(' ');
        seen.bytesWritten! += 1;
      }, script.intervalMs ?? 1000);
      res.on('close', () => clearInterval(timer));
      return;
    }
    if (script.kind === 'large') {
      await this.writeLarge(res, seen, number, script.bytes);
      done();
      return;
    }
    if (script.kind === 'status') {
      seen.status = script.status;
      res.writeHead(script.status, { 'content-type': 'application/json', ...script.headers });
      res.end(
        JSON.stringify(
          script.body ?? { error: { message: `scripted ${script.status}`, type: 'scripted', code: null } },
        ),
      );
      done();
      return;
    }
    const content = script.kind === 'json' ? JSON.stringify(script.content) : script.content;
    seen.status = 200;
    res.writeHead(200, { 'content-type': 'application/json', 'x-request-id': `req_${number}` });
    res.end(JSON.stringify(this.completion(`chatcmpl-${number}`, content)));
    done();
  }

  private completion(id: string, content: string): Record<string, unknown> {
    return {
      id,
      object: 'chat.completion',
      created: 0,
      model: 'fake',
      choices: [{ index: 0, message: { role: 'assistant', content }, finish_reason: 'stop' }],
      usage: { prompt_tokens: 17, completion_tokens: 5, total_tokens: 22 },
    };
  }

  /** `GET /v1/chat/completions?metadata[key]=value&limit=n`: stored completions (`store: true`) whose metadata match. */
  private listStored(query: URLSearchParams, seen: SeenRequest, res: ServerResponse, done: () => void): void {
    this.counters.lists++;
    const wanted = [...query.entries()].flatMap(([k, v]) => {
      const m = /^metadata\[(.+)\]$/.exec(k);
      return m ? [[m[1], v] as const] : [];
    });
    const limit = Number(query.get('limit') ?? 20);
    const data = this.stored
      .filter((c) => wanted.every(([k, v]) => (c.metadata as Record<string, string>)[k] === v))
      .slice(0, limit);
    seen.status = 200;
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(
      JSON.stringify({
        object: 'list',
        data,
        first_id: data[0]?.id ?? null,
        last_id: data.at(-1)?.id ?? null,
        has_more: false,
      }),
    );
    done();
  }

  /**
   * `POST /v1/responses` (background only: it answers `queued` at once), `GET /v1/responses/{id}` and
   * `POST /v1/responses/{id}/cancel`, written from the OpenAI API reference: statuses queued, in_progress,
   * completed, failed, cancelled, incomplete; a second cancel returns the cancelled response (idempotent); a
   * cancel of a response that already ended is a 400; an id past retention (or never created) is a 404.
   */
  private async handleResponses(
    method: string,
    path: string,
    seen: SeenRequest,
    res: ServerResponse,
    done: () => void,
  ): Promise<void> {
    const send = (status: number, body: unknown) => {
      seen.status = status;
      seen.answeredAt = Date.now();
      res.writeHead(status, { 'content-type': 'application/json', 'x-request-id': `req_${this.requests.length}` });
      res.end(JSON.stringify(body));
      done();
    };
    const match = /^\/v1\/responses(?:\/([^/]+))?(\/cancel)?$/.exec(path);
    if (!match) return send(404, apiError(`Unknown request URL: ${method} ${path}.`));
    const [, id, cancel] = match;
    if (method === 'POST' && !id) {
      this.counters.creates++;
      const script = this.backgroundScripts.shift() ?? this.backgroundFallback;
      if (this.latency) await new Promise((r) => setTimeout(r, this.latency));
      if (script.hangCreate) return;
      if (script.createStatus) {
        return send(script.createStatus, apiError(`scripted ${script.createStatus}`, 'server_error'));
      }
      if (seen.body.background !== true) return send(400, apiError('This fake serves background responses only.'));
      const stored: StoredResponse = {
        id: `resp_${randomBytes(16).toString('hex')}`,
        createdAt: Date.now(),
        script,
        body: seen.body,
        retrieves: [],
        cancels: 0,
      };
      this.responses.set(stored.id, stored);
      return send(200, this.responseBody(stored));
    }
    const stored = id ? this.responses.get(id) : undefined;
    if (!stored || Date.now() - stored.createdAt > this.retentionMs) {
      return send(404, apiError(`Response with id '${id}' not found.`));
    }
    if (method === 'GET' && !cancel) {
      this.counters.retrieves++;
      stored.retrieves.push(Date.now());
      return send(200, this.responseBody(stored));
    }
    if (method === 'POST' && cancel) {
      this.counters.cancels++;
      stored.cancels++;
      if (stored.script.stallCancel) {
        seen.status = 200;
        res.writeHead(200, { 'content-type': 'application/json' });
        res.write('{');
        return;
      }
      const status = this.statusOf(stored);
      if ((status === 'queued' || status === 'in_progress') && stored.script.endOnCancel) {
        stored.endedAt = Date.now();
        return send(200, this.responseBody(stored));
      }
      if (status === 'queued' || status === 'in_progress') {
        if (!stored.script.ignoreCancel) stored.cancelledAt = Date.now();
        return send(200, this.responseBody(stored));
      }
      if (status === 'cancelled') return send(200, this.responseBody(stored));
      return send(400, apiError(`Cannot cancel a response with status '${status}'.`));
    }
    return send(404, apiError(`Unknown request URL: ${method} ${path}.`));
  }

  private statusOf(stored: StoredResponse): string {
    if (stored.cancelledAt !== undefined) return 'cancelled';
    const age = Date.now() - stored.createdAt;
    if (age >= stored.script.afterMs || stored.endedAt !== undefined) return stored.script.outcome ?? 'completed';
    return age >= stored.script.afterMs / 5 ? 'in_progress' : 'queued';
  }

  /** The Response object of the API reference, as far as a client reads it. */
  private responseBody(stored: StoredResponse): Record<string, unknown> {
    const status = this.statusOf(stored);
    const text = JSON.stringify(stored.script.content ?? { summary: 'fine' });
    const message = {
      type: 'message',
      id: `msg_${stored.id.slice(5)}`,
      status: 'completed',
      role: 'assistant',
      content: [{ type: 'output_text', text, annotations: [] }],
    };
    const ended = status === 'completed' || status === 'incomplete';
    return {
      id: stored.id,
      object: 'response',
      created_at: Math.floor(stored.createdAt / 1000),
      status,
      background: true,
      error: status === 'failed' ? { code: 'server_error', message: 'The model failed to generate a response.' } : null,
      incomplete_details: status === 'incomplete' ? { reason: 'max_output_tokens' } : null,
      instructions: stored.body.instructions ?? null,
      max_output_tokens: stored.body.max_output_tokens ?? null,
      metadata: stored.body.metadata ?? {},
      model: String(stored.body.model ?? 'fake'),
      output: ended ? [message] : [],
      parallel_tool_calls: true,
      temperature: stored.body.temperature ?? 1,
      text: stored.body.text ?? { format: { type: 'text' } },
      tool_choice: 'auto',
      tools: [],
      top_p: 1,
      usage: ended
        ? {
            input_tokens: 17,
            input_tokens_details: { cached_tokens: 0 },
            output_tokens: 5,
            output_tokens_details: { reasoning_tokens: 0 },
            total_tokens: 22,
          }
        : null,
    };
  }

  /** Streams a completion of about `bytes`, respecting backpressure, and stops when the client goes away. */
  private async writeLarge(res: ServerResponse, seen: SeenRequest, number: number, bytes: number): Promise<void> {
    seen.status = 200;
    seen.bytesWritten = 0;
    res.writeHead(200, { 'content-type': 'application/json', 'x-request-id': `req_${number}` });
    const write = async (text: string) => {
      seen.bytesWritten! += Buffer.byteLength(text);
      if (!res.write(text)) await new Promise((resolve) => (res.once('drain', resolve), res.once('close', resolve)));
    };
    // The summary is a JSON string inside the message content, itself a JSON string: `x` needs no escaping.
    await write(
      `{"id":"chatcmpl-${number}","object":"chat.completion","created":0,"model":"fake","choices":[{"index":0,`,
    );
    await write('"message":{"role":"assistant","content":"{\\"summary\\":\\"');
    const chunk = 'x'.repeat(65_536);
    for (let left = bytes; left > 0 && !res.destroyed; left -= chunk.length) {
      await write(chunk.slice(0, Math.min(left, chunk.length)));
    }
    if (res.destroyed) return;
    res.end('\\"}"},"finish_reason":"stop"}],"usage":{"prompt_tokens":17,"completion_tokens":5,"total_tokens":22}}');
  }
}
