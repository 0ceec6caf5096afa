import type { FastifyReply } from 'fastify';

import type { LiveStream } from './live-stream.js';

export { wantsEventStream } from '../common/event-stream-accept.js';

/**
 * A stream's answer: 200 text/event-stream, unbuffered by proxies (docs/operations.md#live-streams), or 204 when
 * the stream is over for good.
 */
export function sendEventStream(reply: FastifyReply, stream: LiveStream | undefined): void {
  if (!stream) return void reply.status(204).send();
  // A stream that ends without its last byte written (the client left, the process stops) takes its connection
  // with it: a half-closed socket would otherwise hold the server's close open.
  stream.body.once('close', () => {
    if (!reply.raw.writableEnded) reply.raw.destroy();
  });
  void reply
    .header('Content-Type', 'text/event-stream; charset=utf-8')
    .header('Cache-Control', 'no-cache')
    .header('X-Accel-Buffering', 'no')
    .send(stream.body);
}
