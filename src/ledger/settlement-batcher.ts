import { GroupCommit } from '../database/group-commit.js';
import type { ArrivedResultWrite, SettledResult } from './settlement.repository.js';

/** Results one settlement statement takes at most. */
export const SETTLE_BATCH = 64;
/** Settlement statements in flight at once (pool connections they hold). */
export const SETTLE_IN_FLIGHT = 2;

/**
 * Group commit for results (database/group-commit.ts): results that arrive while settlement statements are in
 * flight (a window of calls that finish together) are settled together, each exactly as if alone
 * (SettlementRepository.settleResults). A batch holds at most one result per job, so one statement never decides a
 * race between two of its own rows; a batch that fails for another reason than an outage or a deadlock is settled
 * one result per statement.
 */
export class SettlementBatcher extends GroupCommit<ArrivedResultWrite, SettledResult | undefined> {
  constructor(settle: (writes: ArrivedResultWrite[]) => Promise<Map<string, SettledResult>>) {
    super({
      maxBatch: SETTLE_BATCH,
      maxInFlight: SETTLE_IN_FLIGHT,
      keyOf: (write) => write.jobId,
      // A result already recorded is answered with its prior outcome: a second run after a lost COMMIT re-reads.
      idempotent: true,
      commit: async (writes) => {
        const settled = await settle(writes);
        return writes.map((write) => settled.get(write.attemptId));
      },
    });
  }
}
