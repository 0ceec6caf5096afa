import { Injectable, Logger } from '@nestjs/common';
import { canonicalJson, sha256Hex } from '../common/canonical-json.js';
import { canTransitionAttempt } from '../attempts/attempt-state.js';
import type { Attempt, Usage } from '../attempts/attempt.types.js';
import type { Job } from '../jobs/job.types.js';
import { MetricsService } from '../metrics/metrics.service.js';
import type { Ledger } from './ledger.js';
import { SettlementRepository } from './settlement.repository.js';

export type SettlementOutcome = 'won' | 'discarded' | 'duplicate';

export interface ArrivedResult {
  value: unknown;
  usage: Usage;
  providerRequestId: string | null;
}

/** Exactly one winner (I5): the first valid result to arrive takes the job; every later one is dropped. */
@Injectable()
export class SettlementService {
  private readonly logger = new Logger(SettlementService.name);

  constructor(
    private readonly settlements: SettlementRepository,
    private readonly metrics: MetricsService,
  ) {}

  /** `job` and `attempt` are locked by the caller's ledger, job first. */
  async settleResult(ledger: Ledger, job: Job, attempt: Attempt, arrived: ArrivedResult): Promise<SettlementOutcome> {
    if (attempt.outcome !== null) return 'duplicate'; // the same result delivered twice (worker and lookup)
    const digest = sha256Hex(canonicalJson(arrived.value));
    // An attempt an operator resolved as failed cannot win any more: its late result is discarded like a loser's.
    const eligible = canTransitionAttempt(attempt.status, 'succeeded');
    const version = eligible
      ? await this.settlements.settleIfVersion(job.id, attempt.jobVersion, { status: 'succeeded', result: arrived.value, completedBy: attempt.id }, ledger.manager)
      : undefined;
    const fields = { usage: arrived.usage, providerRequestId: arrived.providerRequestId, resultDigest: digest, finished: true };
    if (version !== undefined) {
      await ledger.moveAttempt(attempt, 'succeeded', 'result_won', { ...fields, outcome: 'won' });
      ledger.recordSettled(job, 'succeeded', 'result_won', { attemptId: attempt.id, version });
      return 'won';
    }
    // Lost: the payload is dropped here, and only its digest is kept.
    const to = eligible ? 'succeeded' : attempt.status;
    const detail = { resultDigest: digest, readVersion: attempt.jobVersion, jobVersion: job.version, winner: job.completedBy, jobStatus: job.status };
    await ledger.moveAttempt(attempt, to, 'result_discarded', { ...fields, outcome: 'discarded' }, detail);
    ledger.afterCommit(() => {
      this.metrics.settlementRaces.inc({ provider: attempt.provider });
      this.logger.warn({ msg: 'settlement race: late result discarded', jobId: job.id, attemptId: attempt.id, winnerAttemptId: job.completedBy, ...detail });
    });
    return 'discarded';
  }

  /** A final failure goes through the same compare-and-swap; false when the job was already settled or cancelled. */
  async settleFailure(ledger: Ledger, job: Job, readVersion: number, error: { reason: string; message: string; lastError?: unknown }): Promise<boolean> {
    const version = await this.settlements.settleIfVersion(job.id, readVersion, { status: 'failed', error }, ledger.manager);
    if (version === undefined) return false;
    ledger.recordSettled(job, 'failed', error.reason, { version });
    return true;
  }

  /** The owner gives up the intent: the job is cancelled and its version bumped (the fence of DESIGN §5). */
  async cancel(ledger: Ledger, job: Job): Promise<boolean> {
    const version = await this.settlements.cancelIfLive(job.id, ledger.manager);
    if (version === undefined) return false;
    ledger.recordSettled(job, 'cancelled', 'cancelled_by_owner', { version });
    return true;
  }
}
