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
  }

  async stop(): Promise<void> {
    for (const socket of this.sockets) socket.destroy();
    await new Promise<void>((resolve) => this.server?.close(() => resolve()) ?? resolve());
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    let raw = '';
    for await (const chunk of req) raw += chunk;
    const seen: SeenRequest = { headers: req.headers, body: raw ? JSON.parse(raw) : {}, at: Date.now() };
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
    const script: Script = this.failing !== undefined ? { kind: 'status', status: this.failing } : (this.scripts.shift() ?? this.fallback);
    if (script.kind === 'hang') return;
    const delay = this.latency + ('delayMs' in script && script.delayMs ? script.delayMs : 0);
    if (delay) await new Promise((r) => setTimeout(r, delay));
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
      res.end(JSON.stringify(script.body ?? { error: { message: `scripted ${script.status}`, type: 'scripted', code: null } }));
      done();
      return;
    }
    const content = script.kind === 'json' ? JSON.stringify(script.content) : script.content;
    seen.status = 200;
    res.writeHead(200, { 'content-type': 'application/json', 'x-request-id': `req_${number}` });
    res.end(
      JSON.stringify({
        id: `chatcmpl-${number}`,
        object: 'chat.completion',
        created: 0,
        model: 'fake',
        choices: [{ index: 0, message: { role: 'assistant', content }, finish_reason: 'stop' }],
        usage: { prompt_tokens: 17, completion_tokens: 5, total_tokens: 22 },
      }),
    );
    done();
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
    await write(`{"id":"chatcmpl-${number}","object":"chat.completion","created":0,"model":"fake","choices":[{"index":0,`);
    await write('"message":{"role":"assistant","content":"{\\"summary\\":\\"');
    const chunk = 'x'.repeat(65_536);
    for (let left = bytes; left > 0 && !res.destroyed; left -= chunk.length) await write(chunk.slice(0, Math.min(left, chunk.length)));
    if (res.destroyed) return;
    res.end('\\"}"},"finish_reason":"stop"}],"usage":{"prompt_tokens":17,"completion_tokens":5,"total_tokens":22}}');
  }
}
