import { jest } from '@jest/globals';
import type { CallHandler, ExecutionContext } from '@nestjs/common';
import { lastValueFrom, throwError, of } from 'rxjs';
import { IdempotencyInterceptor } from './idempotency.interceptor.js';
import type { JobWithAttempts } from '../ledger/job.types.js';
import { DuplicateIdempotencyKeyError } from '../ledger/ledger.errors.js';
import { IdempotencyKeyReusedError } from './jobs.errors.js';
import type { JobsService } from './jobs.service.js';

const job: JobWithAttempts = {
  id: '7f1c7a52-4c50-4b6e-9f59-7c1e2c0b2f10',
  ownerId: 'o',
  idempotencyKey: 'k',
  fingerprint: 'f'.repeat(64),
  operation: 'summarize',
  input: { text: 'x' },
  providers: ['p'],
  status: 'pending',
  version: 0,
  result: null,
  error: null,
  completedBy: null,
  createdAt: new Date(0),
  updatedAt: new Date(0),
  completedAt: null,
  attempts: [],
};

function harness(replay: JobsService['replay']) {
  const reply = { status: jest.fn().mockReturnThis(), header: jest.fn().mockReturnThis(), send: jest.fn().mockReturnThis() };
  const context = {
    switchToHttp: () => ({ getRequest: () => ({ headers: {} }), getResponse: () => reply }),
  } as unknown as ExecutionContext;
  const interceptor = new IdempotencyInterceptor({ replay } as JobsService);
  return { reply, context, interceptor };
}

describe('IdempotencyInterceptor', () => {
  it('answers a collision with the same fingerprint as a 200 replay with Idempotent-Replayed', async () => {
    const replay = jest.fn<JobsService['replay']>().mockResolvedValue(job);
    const { reply, context, interceptor } = harness(replay);
    const next: CallHandler = { handle: () => throwError(() => new DuplicateIdempotencyKeyError('o', 'k', job.fingerprint)) };
    await lastValueFrom(interceptor.intercept(context, next));
    expect(replay).toHaveBeenCalledWith('o', 'k', job.fingerprint, 0, undefined);
    expect(reply.status).toHaveBeenCalledWith(200);
    expect(reply.header).toHaveBeenCalledWith('Idempotent-Replayed', 'true');
    expect(reply.header).toHaveBeenCalledWith('Location', `/v1/jobs/${job.id}`);
    expect(reply.send).toHaveBeenCalledWith(expect.objectContaining({ id: job.id }));
  });

  it('lets the 409 of a different fingerprint through and sends nothing itself', async () => {
    const replay = jest.fn<JobsService['replay']>().mockRejectedValue(new IdempotencyKeyReusedError());
    const { reply, context, interceptor } = harness(replay);
    const next: CallHandler = { handle: () => throwError(() => new DuplicateIdempotencyKeyError('o', 'k', 'other')) };
    await expect(lastValueFrom(interceptor.intercept(context, next))).rejects.toBeInstanceOf(IdempotencyKeyReusedError);
    expect(reply.send).not.toHaveBeenCalled();
  });

  it('leaves every other error and every success alone', async () => {
    const replay = jest.fn<JobsService['replay']>();
    const { context, interceptor } = harness(replay);
    const boom = new Error('boom');
    await expect(lastValueFrom(interceptor.intercept(context, { handle: () => throwError(() => boom) }))).rejects.toBe(boom);
    await expect(lastValueFrom(interceptor.intercept(context, { handle: () => of('ok') }))).resolves.toBe('ok');
    expect(replay).not.toHaveBeenCalled();
  });
});
