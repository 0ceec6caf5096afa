import { ATTEMPT_STATUSES, type AttemptStatus } from './attempt.types.js';
import { JOB_STATUSES, type JobStatus } from './job.types.js';
import {
  assertAttemptTransition,
  assertJobTransition,
  attemptSourcesOf,
  canTransitionAttempt,
  canTransitionJob,
  IllegalTransitionError,
} from './state-machine.js';

const legalAttempt = new Set([
  'starting>running',
  'starting>failed',
  'running>succeeded',
  'running>failed',
  'running>unknown',
  'unknown>succeeded',
  'unknown>failed',
  'unknown>cancelled',
  'cancelled>succeeded',
]);

const legalJob = new Set([
  'pending>running',
  'pending>succeeded',
  'pending>failed',
  'pending>cancelled',
  'running>pending',
  'running>unknown',
  'running>succeeded',
  'running>failed',
  'running>cancelled',
  'unknown>pending',
  'unknown>running',
  'unknown>succeeded',
  'unknown>failed',
  'unknown>cancelled',
]);

const pairs = <T extends string>(values: readonly T[]) =>
  values.flatMap((from) => values.filter((to) => to !== from).map((to) => [from, to] as [T, T]));

describe('attempt state machine (docs/design.md#5-states)', () => {
  it.each(pairs(ATTEMPT_STATUSES))(
    '%s -> %s is legal only if the design lists it',
    (from: AttemptStatus, to: AttemptStatus) => {
      const legal = legalAttempt.has(`${from}>${to}`);
      expect(canTransitionAttempt(from, to)).toBe(legal);
      if (legal) expect(() => assertAttemptTransition(from, to)).not.toThrow();
      else expect(() => assertAttemptTransition(from, to)).toThrow(IllegalTransitionError);
    },
  );

  it('never lets a timeout become failed on its own: unknown leaves only by a result, a resolution or a cancel', () => {
    expect(ATTEMPT_STATUSES.filter((to) => canTransitionAttempt('unknown', to))).toEqual([
      'succeeded',
      'failed',
      'cancelled',
    ]);
  });

  it('lets a cancelled attempt still win with a late result, and nothing else', () => {
    expect(attemptSourcesOf('succeeded').sort()).toEqual(['cancelled', 'running', 'unknown']);
    expect(ATTEMPT_STATUSES.filter((to) => canTransitionAttempt('cancelled', to))).toEqual(['succeeded']);
  });
});

describe('job state machine (docs/design.md#5-states)', () => {
  it.each(pairs(JOB_STATUSES))('%s -> %s is legal only if the design lists it', (from: JobStatus, to: JobStatus) => {
    const legal = legalJob.has(`${from}>${to}`);
    expect(canTransitionJob(from, to)).toBe(legal);
    if (!legal) expect(() => assertJobTransition(from, to)).toThrow(IllegalTransitionError);
  });
});
