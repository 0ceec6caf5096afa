/**
 * A settlement that found no row for an attempt its own worker claimed: retention purged the job (the purge is
 * the only DELETE of attempts, docs/operations.md#retention) while the call was out, so the late result has
 * nowhere to go. Recognised by the ledger's "not found" answer, or a foreign key to the job that is gone.
 * Not an error for the reconciler to find: there is nothing left to reconcile.
 */
export function isPurgedJobError(error: unknown): boolean {
  const e = error as { message?: string; code?: string; constraint?: string } | null;
  if (!e) return false;
  if (typeof e.message === 'string' && /^attempt \S+ of job \S+ was not found$/.test(e.message)) return true;
  // 23503 foreign_key_violation: an event or attempt row written for a job row that no longer exists.
  return e.code === '23503' && typeof e.constraint === 'string' && /job/i.test(e.constraint);
}
