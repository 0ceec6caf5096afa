import { Injectable } from '@nestjs/common';
import type { FastifyReply } from 'fastify';

import type { DomainError } from '../common/domain.errors.js';
import { IdempotencyInterceptor } from '../jobs/idempotency.interceptor.js';
import type { Batch } from '../ledger/batch.types.js';
import { MetricsService } from '../metrics/metrics.service.js';
import { sendBatch } from './batch-reply.js';
import { BatchKeyReusedError } from './batches.errors.js';
import { BatchesService } from './batches.service.js';

/**
 * POST /v1/batches: a batch key holds a batch; its replay is the batch's progress now, with its items as first
 * answered.
 */
@Injectable()
export class BatchesIdempotency extends IdempotencyInterceptor<Batch> {
  protected readonly purged = 'The batch under this key is gone; retry.';

  constructor(
    metrics: MetricsService,
    private readonly batches: BatchesService,
  ) {
    super(metrics);
  }

  protected find(ownerId: string, idempotencyKey: string): Promise<Batch | undefined> {
    return this.batches.findByKey(ownerId, idempotencyKey);
  }

  protected reused(): DomainError {
    return new BatchKeyReusedError();
  }

  protected async replay(stored: Batch, _request: unknown, reply: FastifyReply): Promise<void> {
    sendBatch(reply, 200, await this.batches.replayOf(stored));
  }
}
