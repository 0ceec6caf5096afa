import { Injectable } from '@nestjs/common';

import { type Attempt, type AttemptError, NOT_SENT, type ResolvedBy, type Usage } from '../ledger/attempt.types.js';
import { AttemptsRepository } from '../ledger/attempts.repository.js';
import { isTerminal } from '../ledger/job.types.js';
import { LedgerFactory } from '../ledger/ledger.js';
import { type ArrivedResult, type SettlementOutcome, SettlementService } from '../ledger/settlement.service.js';
import { canTransitionAttempt } from '../ledger/state-machine.js';
import { CatalogService } from '../providers/catalog.service.js';
import { checkOutput } from '../providers/output-contract.js';
import type { LookupResult } from '../providers/provider.port.js';
import { CostMeter } from '../usage/cost-meter.js';
import { AttemptScheduler } from './attempt-scheduler.js';

/**
 * What happens when an attempt's fate becomes known, whoever learns it first: the worker that made the call,
 * a provider status lookup, the reconciler, or the deadline timer. Every method locks job then attempt
 * (Ledger.lockPair) and re-reads the attempt, so concurrent reports of the same fate do no harm.
 */
@Injectable()
export class AttemptOutcomes {
  private readonly givenUpListeners: Array<() => void> = [];

  constructor(
    private readonly ledgers: LedgerFactory,
    private readonly settlement: SettlementService,
    private readonly scheduler: AttemptScheduler,
    private readonly catalog: CatalogService,
    private readonly costs: CostMeter,
    private readonly attempts: AttemptsRepository,
  ) {}

  /**
   * `listener` runs after an attempt whose request the provider keeps by id was given up (failover, the abandon):
   * the reconciler's look-ups cancel that request at the provider (Reconciler.lookup), and start at once.
   */
  onGivenUp(listener: () => void): void {
    this.givenUpListeners.push(listener);
  }

  private givenUp(attempt: Attempt): void {
    if (attempt.providerRequestId) for (const listener of this.givenUpListeners) listener();
  }

  /** A valid result (its contract already checked): compare-and-swap settlement. */
  async succeeded(attemptId: string, jobId: string, arrived: ArrivedResult): Promise<SettlementOutcome> {
    const { outcome, provider } = await this.settlement.settleResult(jobId, attemptId, arrived);
    if (outcome !== 'duplicate') this.costs.record(provider, arrived.usage, outcome);
    return outcome;
  }

  /**
   * A definitive failure: the attempt is failed, and the job moves on (retry, next provider) or settles failed.
   * `said`: the provider's record said so (a look-up), with its status.
   */
  async failed(
    attemptId: string,
    jobId: string,
    error: AttemptError,
    usage?: Usage,
    said?: { by: ResolvedBy; providerStatus?: string },
  ): Promise<void> {
    await this.ledgers.run(async (ledger) => {
      const { job, attempt } = (await ledger.lockPair(jobId, attemptId))!;
      if (!canTransitionAttempt(attempt.status, 'failed')) {
        // Already given up (cancelled by failover or an operator): the slot is free and the job has moved on. An
        // answer the provider billed (an output that broke the contract) still leaves its usage, so its cost.
        if (usage && !attempt.usage) {
          const update = { usage, providerStatus: said?.providerStatus };
          await ledger.moveAttempt(attempt, attempt.status, 'late_failure_ignored', update, error);
          ledger.afterCommit(() => this.costs.record(attempt.provider, usage, 'failed'));
          return;
        }
        ledger.record({
          jobId,
          attemptId,
          subject: 'attempt',
          from: attempt.status,
          to: attempt.status,
          reason: 'late_failure_ignored',
          detail: error,
        });
        if (said?.providerStatus) await ledger.noteProviderStatus(attempt, said.providerStatus, 'provider_status');
        return;
      }
      const update = { error, usage, finished: true, resolvedBy: said?.by, providerStatus: said?.providerStatus };
      await ledger.moveAttempt(attempt, 'failed', error.reason, update);
      await this.scheduler.scheduleAfter(ledger, job, attempt.jobVersion, 'next_attempt_scheduled');
      ledger.afterCommit(() => this.costs.record(attempt.provider, usage, 'failed'));
    });
  }

  /**
   * A claimed attempt that was never sent (its worker vanished between claim and call, or its hard deadline
   * passed before the call): `failed` with reason not_sent (I4), not counted against maxAttempts, and the job
   * goes on by itself. Only a `starting` attempt qualifies: `running` means the call may have been made, except to
   * the worker that marked it (`workerId`), which knows it sent nothing (AttemptRunner.begin): `running`, or
   * `unknown` since, is not sent either when that worker says so.
   */
  async notSent(attemptId: string, jobId: string, why: string, workerId?: string): Promise<boolean> {
    return this.ledgers.run(async (ledger) => {
      const { job, attempt } = (await ledger.lockPair(jobId, attemptId))!;
      const unsent =
        attempt.status === 'starting' ||
        (workerId !== undefined && attempt.workerId === workerId && ['running', 'unknown'].includes(attempt.status));
      if (!unsent) return false;
      await ledger.moveAttempt(attempt, 'failed', NOT_SENT, {
        error: { reason: NOT_SENT, message: why, retryable: true },
        finished: true,
      });
      await this.scheduler.scheduleAfter(ledger, job, attempt.jobVersion, 'attempt_not_sent');
      return true;
    });
  }

  /** Ambiguous: the request may have been processed. The attempt and the job are `unknown` (I4), never `failed`. */
  async unknown(attemptId: string, jobId: string, reason: string, detail?: unknown): Promise<boolean> {
    const moved = await this.ledgers.run(async (ledger) => {
      const { job, attempt } = (await ledger.lockPair(jobId, attemptId))!;
      if (attempt.status !== 'running') return undefined;
      await ledger.moveAttempt(attempt, 'unknown', reason, {}, detail);
      if (job.status === 'running' || job.status === 'pending') await ledger.moveJob(job, 'unknown', reason, null);
      return attempt;
    });
    if (moved) await this.applyTimeoutPolicy(moved);
    return moved !== undefined;
  }

  /**
   * onTimeout policy for an unknown attempt. failover (side-effect-free providers only): give the attempt up and
   * let the next certified provider start; the two then race under I5. hold, or no certified fallback: wait for
   * a lookup or an operator.
   */
  async applyTimeoutPolicy(attempt: Pick<Attempt, 'id' | 'jobId' | 'provider'>): Promise<'failover' | 'hold'> {
    const provider = this.catalog.provider(attempt.provider);
    // Decided from the catalog before any lock: a held attempt costs nothing per reconciler pass.
    if (provider?.onTimeout !== 'failover' || !provider.sideEffectFree) return 'hold';
    const { id: attemptId, jobId } = attempt;
    const givenUp = await this.ledgers.run(async (ledger) => {
      const { job, attempt } = (await ledger.lockPair(jobId, attemptId))!;
      if (attempt.status !== 'unknown' || isTerminal(job.status)) return false;
      const rest = (await ledger.listAttempts(jobId)).map((a) =>
        a.id === attempt.id ? { ...a, status: 'cancelled' as const } : a,
      );
      const plan = await this.scheduler.plan(job, rest);
      // No certified fallback: hold.
      if (plan.kind !== 'attempt' || plan.provider === attempt.provider) return false;
      await ledger.moveAttempt(attempt, 'cancelled', 'failover', { finished: true }, { next: plan.provider });
      await ledger.moveJob(job, 'running', 'failover', 0);
      ledger.afterCommit(() => this.givenUp(attempt));
      return true;
    });
    // Its request, where the provider keeps one by id, is cancelled there by the reconciler's look-ups
    // (Reconciler.lookup): no provider call here, in the worker's or the housekeeping's way.
    return givenUp ? 'failover' : 'hold';
  }

  /**
   * The provider gave the request its id: committed on the attempt, with its event, before the adapter waits
   * for the outcome. `cancel` when the attempt was given up meanwhile (failover): its response is not wanted.
   */
  async submitted(attemptId: string, jobId: string, providerRequestId: string): Promise<'follow' | 'cancel'> {
    return this.ledgers.run(async (ledger) => {
      const { attempt } = (await ledger.lockPair(jobId, attemptId))!;
      await ledger.recordProviderRequest(attempt, providerRequestId);
      return attempt.status === 'cancelled' ? 'cancel' : 'follow';
    });
  }

  /**
   * What the provider's record says of an attempt's request (a look-up, or the answer to a cancel), applied: a
   * completed response is checked against the operation's schema and competes under I5 (it loses to an earlier
   * winner, and is recorded as discarded); failed, cancelled and incomplete fail the attempt with the provider's
   * reason; a response still running keeps the attempt unknown (I3); an id the provider no longer knows, or never
   * gave, leaves it to an operator, and the attempt says why. Returns what was done, for the log and the tests.
   */
  async fromProvider(attempt: Attempt, found: LookupResult): Promise<string> {
    const { id: attemptId, jobId } = attempt;
    if (found.state === 'succeeded') {
      const operation = await this.attempts.operationOfJob(jobId);
      const check = checkOutput(this.catalog, operation, found.response.text);
      const said = { by: 'provider' as const, providerStatus: 'completed' };
      if (!check.ok) {
        const error = {
          reason: 'contract_violation',
          message: 'the output breaks the operation contract',
          retryable: false,
          details: check.errors,
        };
        await this.failed(attemptId, jobId, error, found.response.usage, said);
        return 'contract_violation';
      }
      const { usage, requestId } = found.response;
      return this.succeeded(attemptId, jobId, {
        value: check.value,
        usage,
        providerRequestId: requestId,
        resolvedBy: 'provider',
        providerStatus: 'completed',
      });
    }
    if (found.state === 'failed') {
      const { reason, message, retryable, status } = found.error;
      await this.failed(attemptId, jobId, { reason, message, retryable, status }, undefined, {
        by: 'provider',
        providerStatus: found.providerStatus,
      });
      return reason;
    }
    if (found.state === 'unknown') return 'unknown';
    const providerStatus = found.state === 'pending' ? (found.providerStatus ?? 'in_progress') : found.state;
    const reason =
      found.state === 'pending'
        ? 'provider_status'
        : found.state === 'expired'
          ? 'provider_record_expired'
          : 'provider_id_never_returned';
    await this.ledgers.run(async (ledger) => {
      const pair = await ledger.lockPair(jobId, attemptId);
      if (pair) {
        await ledger.noteProviderStatus(
          pair.attempt,
          providerStatus,
          reason,
          'reason' in found ? { why: found.reason } : undefined,
        );
      }
    });
    return providerStatus;
  }

  /** Nobody listens any more for an unknown attempt of a finished job: free it. */
  async abandon(attemptId: string, jobId: string): Promise<void> {
    await this.ledgers.run(async (ledger) => {
      const { job, attempt } = (await ledger.lockPair(jobId, attemptId))!;
      if (attempt.status === 'unknown' && isTerminal(job.status)) {
        await ledger.moveAttempt(attempt, 'cancelled', 'abandoned_job_finished', { finished: true });
        ledger.afterCommit(() => this.givenUp(attempt));
      }
    });
  }
}
