/**
 * A call in flight, what an owner's maxConcurrency bounds (docs/design.md#fair-share), as a predicate on an attempt
 * aliased `a`: `starting` or `running`, or `unknown` or `cancelled` with the worker still following its call, all
 * until the hard deadline (when the worker gives the call up), whatever the job's status now (an owner's cancel
 * does not stop a call). Not jobs `running`: a job between attempts (a retry's back-off, a failover, an operator's
 * resolve) is `running` with no call. A range scan of IDX_attempts_in_flight: the calls open now, never the history.
 * Shared by the claim (src/ledger/jobs.sql.ts), GET /v1/ops/owners and onejob_owner_jobs, so all three agree.
 */
export const CALL_IN_FLIGHT = `a.status IN ('starting', 'running', 'unknown', 'cancelled')
  AND a.hard_deadline_at > now()`;
