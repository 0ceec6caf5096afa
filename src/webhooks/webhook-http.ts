import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import type { LookupFunction } from 'node:net';

import { HostLookup } from '../common/host-lookup.js';

/**
 * The name resolution of webhooks, a class of its own so that it is one instance for the module (the URL check
 * at creation and every delivery) and can be found by its token: HostLookup, bounded by DNS_TIMEOUT_MS and off
 * libuv's thread pool, so a tenant's name whose DNS server never answers stalls neither other tenants' deliveries
 * nor anything else of the process (docs/operations.md#name-resolution).
 */
export class WebhookHostLookup extends HostLookup {}

export interface PostOptions {
  headers: Record<string, string>;
  /** Aborts the exchange, connect to answer: the delivery's deadline. */
  signal: AbortSignal;
  /** How the host is resolved and checked when the socket connects (IP literals are checked before: no lookup). */
  lookup: LookupFunction;
}

/**
 * One POST with node:http(s), on a connection of its own (no pooled socket: each delivery resolves and checks
 * the address it connects to). node:http never follows a redirect; the answer's body is not read, its socket is
 * closed as soon as the status line and headers are in. Resolves with the status code.
 */
export function postOnce(url: URL, body: string, options: PostOptions): Promise<number> {
  return new Promise((resolve, reject) => {
    const send = url.protocol === 'https:' ? httpsRequest : httpRequest;
    const request = send(
      url,
      {
        method: 'POST',
        headers: { ...options.headers, 'content-length': String(Buffer.byteLength(body)) },
        signal: options.signal,
        lookup: options.lookup,
        agent: false,
      },
      (response) => {
        resolve(response.statusCode ?? 0);
        response.destroy();
      },
    );
    request.on('error', reject);
    request.end(body);
  });
}
