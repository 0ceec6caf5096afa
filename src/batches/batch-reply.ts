import type { FastifyReply } from 'fastify';

import { type BatchCreatedView, toBatchItemView, toBatchView } from './batch.view.js';
import type { SubmittedBatch } from './batches.service.js';

/** Writes a batch create's answer: the status and headers the idempotency contract promises. */
export function sendBatch(reply: FastifyReply, status: 200 | 201, { batch, items }: SubmittedBatch): void {
  void reply.status(status).header('Location', `/v1/batches/${batch.id}`);
  if (status === 200) void reply.header('Idempotent-Replayed', 'true');
  const view: BatchCreatedView = { ...toBatchView(batch), items: items.map(toBatchItemView) };
  void reply.send(view);
}
