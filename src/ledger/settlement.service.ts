import { Inject, Injectable, Logger, Optional } from '@nestjs/common';
import { DataSource } from 'typeorm';

import { canonicalJson, sha256Hex } from '../common/canonical-json.js';
import { MetricsService } from '../metrics/metrics.service.js';
import type { ResolvedBy, Usage } from './attempt.types.js';
import { JobSignals } from './job-signals.js';
import { OUTBOX, type Outbox } from './outbox.port.js';
import { SettlementRepository } from './settlement.repository.js';
import { SettlementBatcher } from './settlement-batcher.js';
import { attemptSourcesOf } from './state-machine.js';

export type SettlementOutcome = 'won' | 'discarded' | 'duplicate';

/** The attempt statuses a result may settle from (an operator's `failed` is not one: such a result is discarded). */
const SUCCEEDED_FROM = attemptSourcesOf('succeeded');

export interface ArrivedResult {
  value: unknown;
  usage: Usage;
  providerRequestId: string | null;
  /** A look-up of the provider's record found it (`provider`); the call's own answer otherwise. */
  resolvedBy?: ResolvedBy;
  providerStatus?: string;
}

/**
 * The settlement of a result (docs/design.md#flow, I5): the compare-and-swap on the job row and the batching of the
 * results that arrive together into one autocommit statement (SettlementBatcher over SETTLE_RESULTS,
 * `src/ledger/settlement.sql.ts`), then what follows a settlement in this process: metrics, the race's log line,
 * the wake-ups of waiters and of the webhook dispatcher. The failure side's compare-and-swap, `failIfVersion`,
 * runs inside a ledger transaction (`Ledger.settleFailure`), since it moves the job with its events.
 */
@Injectable()
export class SettlementService {
  private readonly logger = new Logger('Ledger');
  private readonly batcher: SettlementBatcher;

  constructor(
    dataSource: DataSource,
    settlements: SettlementRepository,
    private readonly metrics: MetricsService,
    private readonly signals: JobSignals,
    @Optional() @Inject(OUTBOX) private readonly outbox?: Outbox,
  ) {
    this.batcher = new SettlementBatcher((writes) => settlements.settleResults(writes, dataSource.manager));
  }

  /**
   * Exactly one winner (I5): the first valid result to arrive takes the job by compare-and-swap; a later one
   * keeps only its digest. One autocommit statement (SettlementRepository.settleResults) locks, decides, writes
   * and records, for this result and the others that arrived with it (SettlementBatcher); metrics, the race log
   * line and wake-ups follow it.
   */
  async settleResult(
    jobId: string,
    attemptId: string,
    arrived: ArrivedResult,
  ): Promise<{ outcome: SettlementOutcome; provider: string }> {
    const digest = sha256Hex(canonicalJson(arrived.value));
    const settled = await this.batcher.submit({
      jobId,
      attemptId,
      eligibleFrom: SUCCEEDED_FROM,
      value: arrived.value,
      usage: arrived.usage,
      providerRequestId: arrived.providerRequestId,
      resolvedBy: arrived.resolvedBy ?? 'deadline',
      providerStatus: arrived.providerStatus ?? null,
      resultDigest: digest,
    });
    if (!settled) throw new Error(`attempt ${attemptId} of job ${jobId} was not found`);
    const provider = settled.provider;
    // The same result delivered twice (worker and lookup), or a statement run again after its answer was lost: what
    // the database holds is read back (priorOutcome), and a win's wake-ups are raised again (they are idempotent).
    if (settled.priorOutcome !== null) {
      if (settled.priorOutcome === 'won') {
        this.signals.jobSettled(jobId);
        this.outbox?.announced();
      }
      return { outcome: 'duplicate', provider };
    }
    if (settled.attemptTo !== settled.attemptFrom) {
      this.metrics.attempts.inc({ provider: settled.provider, status: settled.attemptTo });
    }
    if (settled.attemptFrom === 'unknown') this.metrics.unknownResolved.inc({ by: arrived.resolvedBy ?? 'deadline' });
    if (settled.version !== null) {
      this.metrics.jobsSettled.inc({ status: 'succeeded' });
      this.signals.jobSettled(jobId);
      if (settled.announced) this.outbox?.announced();
      return { outcome: 'won', provider };
    }
    this.signals.eventsWritten([jobId]);
    this.metrics.settlementRaces.inc({ provider: settled.provider });
    this.logger.warn({
      msg: 'settlement race: late result discarded',
      jobId,
      attemptId,
      winnerAttemptId: settled.winner,
      resultDigest: digest,
      readVersion: settled.readVersion,
      jobVersion: settled.jobVersion,
      jobStatus: settled.jobFrom,
    });
    return { outcome: 'discarded', provider };
  }
}
