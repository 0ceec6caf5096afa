import { PassThrough } from 'node:stream';

import { idAfter, sseMessage, type StreamMessage, type StreamSource } from './stream-source.js';

/** Messages read per query; a longer backlog is read page after page, at once. */
const PAGE = 500;
/** A failed read (the database restarting) is retried after this, doubling up to READ_RETRY_MAX_MS. */
const READ_RETRY_MS = 250;
const READ_RETRY_MAX_MS = 4000;

export interface LiveStreamOptions {
  heartbeatMs: number;
  /** The reconnection delay a client is told to use (`retry:`). */
  retryMs: number;
}

/**
 * One client's stream (docs/design.md#live-streams): everything after the last id it delivered, each time it is
 * woken; a heartbeat comment while nothing happens. It reads the database only when woken (a NOTIFY, the LISTEN
 * session changing state, the process's sweep) or to retry a failed read: never on a timer of its own. A read
 * that fails (the database restarting) is retried from the same id, so the client sees every message once, in
 * order, without reconnecting.
 */
export class LiveStream {
  /** What the HTTP response sends (Fastify pipes it, and destroys it when the client goes away). */
  readonly body = new PassThrough();
  private lastId: string | undefined;
  private dirty = true;
  /** Set while a failed read waits to be retried. */
  private retryAt: number | undefined;
  private closed = false;
  private wake?: () => void;
  private readonly done: Promise<void>;

  constructor(
    readonly source: StreamSource,
    lastEventId: string | undefined,
    private readonly options: LiveStreamOptions,
  ) {
    this.lastId = lastEventId;
    this.body.on('close', () => this.stop());
    this.done = this.run();
  }

  /** The id of the last message sent (or the one the client resumed after). */
  get delivered(): string | undefined {
    return this.lastId;
  }

  /** Something may have been written: read again. */
  poke(): void {
    this.dirty = true;
    this.retryAt = undefined;
    this.wake?.();
  }

  /** Ends the stream (the client left, or the process is stopping): the client resumes with Last-Event-ID. */
  stop(): void {
    this.closed = true;
    this.wake?.();
  }

  /** Resolves when the stream has ended, whatever ended it. */
  ended(): Promise<void> {
    return this.done;
  }

  private async run(): Promise<void> {
    // Sent at once: it flushes the headers, and tells EventSource how soon to come back after a drop.
    await this.write(`retry: ${this.options.retryMs}\n\n`);
    let nextHeartbeat = Date.now() + this.options.heartbeatMs;
    let retryMs = READ_RETRY_MS;
    let ending = false;
    while (!this.closed) {
      if (this.dirty && (this.retryAt === undefined || Date.now() >= this.retryAt)) {
        this.dirty = false;
        const messages = await this.source.read(this.lastId, PAGE).catch(() => undefined);
        if (messages === undefined) {
          this.dirty = true;
          this.retryAt = Date.now() + retryMs;
          retryMs = Math.min(retryMs * 2, READ_RETRY_MAX_MS);
        } else {
          this.retryAt = undefined;
          retryMs = READ_RETRY_MS;
          if (!(await this.send(messages))) break;
          if (messages.length === PAGE) this.dirty = true;
          else if (ending) break;
        }
        if (this.dirty && this.retryAt === undefined) continue;
      }
      const endsIn = this.source.endsInMs();
      if (endsIn !== undefined && endsIn <= 0 && !ending) {
        // One last read at the end of the grace, then close.
        ending = true;
        this.dirty = true;
        continue;
      }
      const now = Date.now();
      let wait = nextHeartbeat - now;
      if (endsIn !== undefined) wait = Math.min(wait, endsIn);
      if (this.retryAt !== undefined) wait = Math.min(wait, this.retryAt - now);
      await this.sleep(Math.max(0, wait));
      if (Date.now() >= nextHeartbeat && !this.closed) {
        if (!(await this.write(': heartbeat\n\n'))) break;
        nextHeartbeat = Date.now() + this.options.heartbeatMs;
      }
    }
    this.closed = true;
    if (!this.body.destroyed) this.body.end();
  }

  private async send(messages: StreamMessage[]): Promise<boolean> {
    for (const message of messages) {
      // A resumed stream never repeats what the client had, whatever the source returns.
      if (!idAfter(message.id, this.lastId)) continue;
      if (!(await this.write(sseMessage(message)))) return false;
      this.lastId = message.id;
    }
    return true;
  }

  /** False when the client is gone. Waits while the client reads slower than we write (backpressure). */
  private async write(chunk: string): Promise<boolean> {
    if (this.closed || this.body.destroyed) return false;
    if (this.body.write(chunk)) return true;
    await new Promise<void>((resolve) => {
      const done = () => {
        this.body.off('drain', done);
        this.body.off('close', done);
        resolve();
      };
      this.body.on('drain', done);
      this.body.on('close', done);
    });
    return !this.body.destroyed;
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.wake = undefined;
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.wake = done;
    });
  }
}
