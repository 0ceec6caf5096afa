import type { AttemptStatus } from './attempt.types.js';
import type { JobStatus } from './job.types.js';

/**
 * The state machine of docs/design.md#5-states, in one place. `starting` never becomes `unknown`: a worker marks an
 * attempt `running` right before the call, so a `starting` one provably never reached its provider and ends
 * `failed` (`not_sent`, or the prompt could not be rendered).
 */
export const ATTEMPT_TRANSITIONS: Record<AttemptStatus, readonly AttemptStatus[]> = {
  starting: ['running', 'failed'],
  running: ['succeeded', 'failed', 'unknown'],
  unknown: ['succeeded', 'failed', 'cancelled'],
  // "We stopped waiting" is not a fence: a result that still arrives competes by I5.
  cancelled: ['succeeded'],
  succeeded: [],
  failed: [],
};

/**
 * `running` and `unknown` go back to `pending` only when no attempt is live and the next one waits for a provider's
 * pause or cooldown (Ledger.deferOn): `running` with nothing running would mislead whoever reads the job.
 */
export const JOB_TRANSITIONS: Record<JobStatus, readonly JobStatus[]> = {
  pending: ['running', 'succeeded', 'failed', 'cancelled'],
  running: ['pending', 'unknown', 'succeeded', 'failed', 'cancelled'],
  unknown: ['pending', 'running', 'succeeded', 'failed', 'cancelled'],
  succeeded: [],
  failed: [],
  cancelled: [],
};

export class IllegalTransitionError extends Error {
  constructor(
    readonly subject: 'job' | 'attempt',
    readonly from: string,
    readonly to: string,
  ) {
    super(`illegal ${subject} transition ${from} -> ${to}`);
    this.name = 'IllegalTransitionError';
  }
}

export function canTransitionAttempt(from: AttemptStatus, to: AttemptStatus): boolean {
  return ATTEMPT_TRANSITIONS[from].includes(to);
}

export function assertAttemptTransition(from: AttemptStatus, to: AttemptStatus): void {
  if (!canTransitionAttempt(from, to)) throw new IllegalTransitionError('attempt', from, to);
}

export function canTransitionJob(from: JobStatus, to: JobStatus): boolean {
  return JOB_TRANSITIONS[from].includes(to);
}

export function assertJobTransition(from: JobStatus, to: JobStatus): void {
  if (!canTransitionJob(from, to)) throw new IllegalTransitionError('job', from, to);
}

/** The statuses an attempt may be in to move to `to`: the WHERE clause of a conditional UPDATE. */
export function attemptSourcesOf(to: AttemptStatus): AttemptStatus[] {
  return (Object.keys(ATTEMPT_TRANSITIONS) as AttemptStatus[]).filter((from) => ATTEMPT_TRANSITIONS[from].includes(to));
}
