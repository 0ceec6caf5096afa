import type { FastifyReply } from 'fastify';

import type { JobWithAttempts } from '../ledger/job.types.js';
import { toJobView } from './job.view.js';

/** Writes a job answer: the status and headers the idempotency contract promises. */
export function sendJob(
  reply: FastifyReply,
  status: 200 | 201,
  job: JobWithAttempts,
  options: { replayed?: boolean; waited?: number } = {},
): void {
  void reply.status(status).header('Location', `/v1/jobs/${job.id}`);
  if (options.replayed) void reply.header('Idempotent-Replayed', 'true');
  if (options.waited) void reply.header('Preference-Applied', `wait=${options.waited}`);
  void reply.send(toJobView(job));
}
