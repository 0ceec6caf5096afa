import { jest } from '@jest/globals';

import type { JobWithAttempts } from '../ledger/job.types.js';
import { DuplicateIdempotencyKeyError } from '../ledger/ledger.errors.js';
import { IdempotencyKeyReusedError } from './jobs.errors.js';
import { JobsService } from './jobs.service.js';

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
  priority: 0,
  result: null,
  error: null,
  completedBy: null,
  createdAt: new Date(0),
  updatedAt: new Date(0),
  completedAt: null,
  attempts: [],
};

/** JobsService.submit with create and replay stubbed: the mapping alone (test/jobs.e2e-spec.ts runs it on PostgreSQL). */
function harness(create: JobsService['create'], replay: JobsService['replay']) {
  const service = Object.create(JobsService.prototype) as JobsService;
  Object.assign(service, { create, replay });
  return service;
}

describe('JobsService.submit: the idempotency mapping', () => {
  const command = { operation: 'summarize', input: { text: 'x' } };

  it('answers a collision with the same fingerprint as a replay of the stored job', async () => {
    const create = jest
      .fn<JobsService['create']>()
      .mockRejectedValue(new DuplicateIdempotencyKeyError('o', 'k', job.fingerprint));
    const replay = jest.fn<JobsService['replay']>().mockResolvedValue(job);
    await expect(harness(create, replay).submit('o', 'k', command, 0)).resolves.toEqual({ job, replayed: true });
    expect(replay).toHaveBeenCalledWith('o', 'k', job.fingerprint, 0, undefined);
  });

  it('lets the 409 of a different fingerprint through', async () => {
    const create = jest
      .fn<JobsService['create']>()
      .mockRejectedValue(new DuplicateIdempotencyKeyError('o', 'k', 'other'));
    const replay = jest.fn<JobsService['replay']>().mockRejectedValue(new IdempotencyKeyReusedError());
    await expect(harness(create, replay).submit('o', 'k', command)).rejects.toBeInstanceOf(IdempotencyKeyReusedError);
  });

  it('leaves every other error and every success alone', async () => {
    const boom = new Error('boom');
    const replay = jest.fn<JobsService['replay']>();
    await expect(
      harness(jest.fn<JobsService['create']>().mockRejectedValue(boom), replay).submit('o', 'k', command),
    ).rejects.toBe(boom);
    await expect(
      harness(jest.fn<JobsService['create']>().mockResolvedValue(job), replay).submit('o', 'k', command),
    ).resolves.toEqual({ job, replayed: false });
    expect(replay).not.toHaveBeenCalled();
  });
});
