import { once } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';

import type { FastifyReply } from 'fastify';

import { clientGoneSignal } from './request-headers.js';

/**
 * A real HTTP server: the handler asks for the signal only after `delayMs`, as a guard awaiting the database would.
 * The client leaves `clientAbortsAfterMs` after the server has the request (counted from its arrival, so a slow
 * machine cannot abort a request the server never saw). The answer is read once the server's response has closed.
 */
async function signalAfter(delayMs: number, clientAbortsAfterMs: number): Promise<AbortSignal> {
  let resolveSignal!: (signal: AbortSignal) => void;
  const taken = new Promise<AbortSignal>((resolve) => (resolveSignal = resolve));
  const controller = new AbortController();
  let abort: NodeJS.Timeout | undefined;
  let closed: Promise<unknown> = Promise.resolve();
  const server = http.createServer((_req, res) => {
    // What clientGoneSignal listens to: the test reads the signal only once the server has seen it.
    closed = once(res, 'close');
    abort = setTimeout(() => controller.abort(), clientAbortsAfterMs);
    setTimeout(() => {
      const signal = clientGoneSignal({ raw: res } as unknown as FastifyReply);
      resolveSignal(signal);
      setTimeout(() => res.end('late'), 100);
    }, delayMs);
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const request = fetch(`http://127.0.0.1:${(server.address() as AddressInfo).port}/`, {
    signal: controller.signal,
  }).catch(() => undefined);
  const signal = await taken;
  await request;
  // The fetch settles on the client's side; the server notices the closed socket a moment later (under load, after
  // the test used to read the signal).
  await closed;
  clearTimeout(abort);
  // The client's keep-alive connection too: a server that waits for it would hold the test process up.
  server.closeAllConnections();
  server.close();
  return signal;
}

describe('clientGoneSignal', () => {
  it('is aborted when the client left before the handler asked for it (the close event was already gone)', async () => {
    expect((await signalAfter(150, 20)).aborted).toBe(true);
  });

  it('aborts when the client leaves while the handler waits', async () => {
    expect((await signalAfter(0, 50)).aborted).toBe(true);
  });

  it('stays quiet for a client that waits for its answer', async () => {
    expect((await signalAfter(0, 10_000)).aborted).toBe(false);
  });
});
