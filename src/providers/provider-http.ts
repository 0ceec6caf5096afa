import { Agent, type Dispatcher, fetch as undiciFetch } from 'undici';

import type { HostLookup } from '../common/host-lookup.js';

/** Raised into a call whose answer passed its operation's `maxResponseBytes` (docs/catalog.md). */
export class ResponseTooLargeError extends Error {
  readonly code = 'RESPONSE_TOO_LARGE';
  constructor(readonly limit: number) {
    super(`the answer is larger than ${limit} bytes`);
    this.name = 'ResponseTooLargeError';
  }
}

type Handler = Dispatcher.DispatchHandler & Record<string, unknown>;
type Abort = (reason?: Error) => void;

/**
 * One call's view of the HTTP exchange, given to fetch as its `dispatcher`: it forwards to the provider's
 * connection pool and watches the handler fetch passes down. `sent` turns true when undici hands the request to
 * a connected socket (`onConnect`): before that, a failure or an abort provably sent nothing (I4: a refused
 * connection, not an unknown attempt). The answer's bytes are counted as they arrive, and the exchange is cut
 * off past `maxResponseBytes`, so an oversize answer is never held in memory (issue 22 item 4).
 */
export class ProviderCall {
  sent = false;
  tooLarge = false;
  private received = 0;

  constructor(
    private readonly pool: Dispatcher,
    readonly maxResponseBytes: number,
  ) {}

  /**
   * The SDK request's `fetchOptions`. Typed `never`: the SDKs type `dispatcher` as the undici of @types/node,
   * which this one (the npm package's, the same shape) is not by name.
   */
  get fetchOptions(): { dispatcher: never } {
    return { dispatcher: this as never };
  }

  dispatch(options: Dispatcher.DispatchOptions, handler: Dispatcher.DispatchHandler): boolean {
    return this.pool.dispatch(options, this.watch(handler as Handler));
  }

  private watch(handler: Handler): Dispatcher.DispatchHandler {
    let abort: Abort | undefined;
    const refuse = () => {
      this.tooLarge = true;
      abort?.(new ResponseTooLargeError(this.maxResponseBytes));
      return false;
    };
    const own: Record<string, (...args: never[]) => unknown> = {
      onConnect: (cut: Abort, context: unknown) => {
        this.sent = true;
        abort = cut;
        return (handler.onConnect as (a: Abort, c: unknown) => unknown)?.(cut, context);
      },
      onHeaders: (status: number, raw: Buffer[], resume: () => void, text: string) => {
        // A declared length past the limit is refused before a byte of the body is read. An error answer's
        // status is what matters: its body, counted below all the same, is only read for a message.
        for (let i = 0; status < 300 && i + 1 < raw.length; i += 2) {
          const name = raw[i].toString('latin1').toLowerCase();
          if (name === 'content-length' && Number(raw[i + 1].toString('latin1')) > this.maxResponseBytes) {
            return refuse();
          }
        }
        return (handler.onHeaders as (...a: unknown[]) => boolean)(status, raw, resume, text);
      },
      onData: (chunk: Buffer) => {
        this.received += chunk.length;
        if (this.received > this.maxResponseBytes) return refuse();
        return (handler.onData as (c: Buffer) => boolean)(chunk);
      },
    };
    // Everything else fetch's handler has goes to it unchanged, with itself as `this`.
    return new Proxy(handler, {
      get: (target, property, receiver) => {
        const mine = typeof property === 'string' && property in own && typeof target[property] === 'function';
        if (mine) return own[property];
        const value = Reflect.get(target, property, receiver) as unknown;
        return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
      },
    });
  }
}

/**
 * The HTTP of one SDK provider: a connection pool whose names are resolved by HostLookup (bounded in time, off
 * libuv's thread pool: docs/operations.md#name-resolution), and undici's own `fetch` for the SDK, the one that
 * understands that pool and the per-call dispatcher above (Node's bundled fetch would not).
 */
export class ProviderHttp {
  private readonly pool: Agent;

  constructor(lookup: HostLookup, connectTimeoutMs: number) {
    this.pool = new Agent({ connect: { lookup: lookup.lookupFunction(), timeout: connectTimeoutMs } });
  }

  /** The SDK's `fetch` option. */
  readonly fetch = ((input: string | URL, init?: RequestInit) =>
    undiciFetch(input, init as Parameters<typeof undiciFetch>[1])) as unknown as typeof globalThis.fetch;

  /** A call's dispatcher, passed as the SDK request's `fetchOptions.dispatcher`. */
  call(maxResponseBytes: number): ProviderCall {
    return new ProviderCall(this.pool, maxResponseBytes);
  }

  close(): Promise<void> {
    return this.pool.close();
  }
}
