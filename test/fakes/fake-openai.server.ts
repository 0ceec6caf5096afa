import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';

/** What the fake answers to one request. */
export type Script =
  | { kind: 'json'; content: unknown; delayMs?: number }
  | { kind: 'text'; content: string; delayMs?: number }
  | { kind: 'status'; status: number; delayMs?: number; body?: unknown }
  | { kind: 'hang' }
  | { kind: 'reset' };

export interface SeenRequest {
  headers: IncomingMessage['headers'];
  body: Record<string, unknown>;
}

/**
 * A real OpenAI-compatible chat-completions server on 127.0.0.1, answering from a script: the adapter tests
 * talk to it through the official SDK, over HTTP, so nothing of the SDK is mocked.
 */
export class FakeOpenAiServer {
  readonly requests: SeenRequest[] = [];
  private readonly scripts: Script[] = [];
  private fallback: Script = { kind: 'json', content: { summary: 'fine' } };
  private readonly sockets = new Set<Socket>();
  private server?: Server;
  url = '';

  async start(): Promise<this> {
    this.server = createServer((req, res) => void this.handle(req, res));
    this.server.on('connection', (socket) => {
      this.sockets.add(socket);
      socket.on('close', () => this.sockets.delete(socket));
    });
    await new Promise<void>((resolve) => this.server!.listen(0, '127.0.0.1', resolve));
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

  reset(): void {
    this.requests.length = 0;
    this.scripts.length = 0;
    this.fallback = { kind: 'json', content: { summary: 'fine' } };
  }

  async stop(): Promise<void> {
    for (const socket of this.sockets) socket.destroy();
    await new Promise<void>((resolve) => this.server?.close(() => resolve()) ?? resolve());
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    let raw = '';
    for await (const chunk of req) raw += chunk;
    this.requests.push({ headers: req.headers, body: raw ? JSON.parse(raw) : {} });
    const script = this.scripts.shift() ?? this.fallback;
    if (script.kind === 'hang') return;
    if ('delayMs' in script && script.delayMs) await new Promise((r) => setTimeout(r, script.delayMs));
    if (script.kind === 'reset') {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.write('{"id":"chatcmpl-partial","choices":[{"message":{"content":"{\\"sum');
      setTimeout(() => res.socket?.destroy(), 5);
      return;
    }
    if (script.kind === 'status') {
      res.writeHead(script.status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(script.body ?? { error: { message: `scripted ${script.status}`, type: 'scripted', code: null } }));
      return;
    }
    const content = script.kind === 'json' ? JSON.stringify(script.content) : script.content;
    res.writeHead(200, { 'content-type': 'application/json', 'x-request-id': `req_${this.requests.length}` });
    res.end(
      JSON.stringify({
        id: `chatcmpl-${this.requests.length}`,
        object: 'chat.completion',
        created: 0,
        model: 'fake',
        choices: [{ index: 0, message: { role: 'assistant', content }, finish_reason: 'stop' }],
        usage: { prompt_tokens: 17, completion_tokens: 5, total_tokens: 22 },
      }),
    );
  }
}
