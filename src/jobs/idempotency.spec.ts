import type { CallHandler, ExecutionContext } from '@nestjs/common';
import { INTERCEPTORS_METADATA } from '@nestjs/common/constants.js';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { firstValueFrom, from } from 'rxjs';

import { BatchesController } from '../batches/batches.controller.js';
import { BatchesIdempotency } from '../batches/batches.idempotency.js';
import { DomainError } from '../common/domain.errors.js';
import { DuplicateIdempotencyKeyError } from '../ledger/ledger.errors.js';
import type { MetricsService } from '../metrics/metrics.service.js';
import { IdempotencyInterceptor, JobsIdempotency } from './idempotency.interceptor.js';
import { JobsController } from './jobs.controller.js';
import { IdempotencyKeyReusedError } from './jobs.errors.js';

interface Stored {
  id: string;
  fingerprint: string;
}

/**
 * The mapping alone, on a route whose keys live in a Map: test/jobs.e2e-spec.ts and test/batches.e2e-spec.ts run
 * the two real routes (JobsIdempotency, BatchesIdempotency) on PostgreSQL.
 */
class MapRoute extends IdempotencyInterceptor<Stored> {
  protected readonly purged = 'purged just now';
  readonly replayed: Stored[] = [];
  conflicts = 0;

  constructor(private readonly keys: Map<string, Stored>) {
    super({ idempotencyConflicts: { inc: () => this.conflicts++ } } as unknown as MetricsService);
  }

  protected find(ownerId: string, key: string): Promise<Stored | undefined> {
    return Promise.resolve(this.keys.get(`${ownerId}/${key}`));
  }

  protected reused(): DomainError {
    return new IdempotencyKeyReusedError();
  }

  protected replay(stored: Stored, _request: FastifyRequest, _reply: FastifyReply): Promise<void> {
    this.replayed.push(stored);
    return Promise.resolve();
  }
}

const stored = { id: 'j1', fingerprint: 'f'.repeat(64) };
/** The route's handler, through the interceptor as Nest runs it: it throws `outcome` when an error, or succeeds. */
const run = async (route: MapRoute, outcome: unknown) => {
  let created = false;
  const context = {
    switchToHttp: () => ({ getRequest: () => ({}), getResponse: () => ({}) }),
  } as unknown as ExecutionContext;
  const handler: CallHandler = {
    handle: () =>
      from(
        (async () => {
          if (outcome instanceof Error) throw outcome;
          created = true;
        })(),
      ),
  };
  await firstValueFrom(route.intercept(context, handler), { defaultValue: undefined });
  return created;
};

describe('IdempotencyInterceptor on the create routes', () => {
  it('is attached with @UseInterceptors to POST /v1/jobs and POST /v1/batches, each with its own mapping', () => {
    // The metadata Nest reads to build the route's interceptor pipeline.
    expect(Reflect.getMetadata(INTERCEPTORS_METADATA, JobsController.prototype.createJob)).toEqual([JobsIdempotency]);
    expect(Reflect.getMetadata(INTERCEPTORS_METADATA, BatchesController.prototype.createBatch)).toEqual([
      BatchesIdempotency,
    ]);
  });
});

describe('IdempotencyInterceptor: the idempotency mapping', () => {
  it('answers a taken key with the same fingerprint as a replay of what it holds', async () => {
    const route = new MapRoute(new Map([['o/k', stored]]));
    await run(route, new DuplicateIdempotencyKeyError('o', 'k', stored.fingerprint));
    expect(route.replayed).toEqual([stored]);
    expect(route.conflicts).toBe(0);
  });

  it('answers another fingerprint under the key with the 409, and counts the conflict', async () => {
    const route = new MapRoute(new Map([['o/k', stored]]));
    await expect(run(route, new DuplicateIdempotencyKeyError('o', 'k', 'other'))).rejects.toBeInstanceOf(
      IdempotencyKeyReusedError,
    );
    expect(route.replayed).toEqual([]);
    expect(route.conflicts).toBe(1);
  });

  it('answers 503 when the key was purged between the INSERT and the read', async () => {
    const route = new MapRoute(new Map());
    const answer = run(route, new DuplicateIdempotencyKeyError('o', 'k', stored.fingerprint));
    await expect(answer).rejects.toMatchObject({ status: 503, message: 'purged just now' });
  });

  it('leaves every other error and every success alone', async () => {
    const route = new MapRoute(new Map([['o/k', stored]]));
    const boom = new Error('boom');
    await expect(run(route, boom)).rejects.toBe(boom);
    await expect(run(route, 'created')).resolves.toBe(true);
    expect(route.replayed).toEqual([]);
  });
});
