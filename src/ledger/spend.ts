/**
 * What an owner spent in a currency since a moment, as SQL: the one reading of it for the budget's three
 * statements (a budgeted create, INSERT_JOBS_WITHIN_BUDGET; a batch's check, CHECK_BATCH_BUDGET; `GET /v1/budget`,
 * USED_SINCE in src/usage/), so each counts alike. It is the cost of the owner's attempts that still exist plus
 * what the retention purge kept of those it deleted (`purged_usage`, by the UTC day they started: a purged day
 * counts when it begins at or after `since`), so a purge never refunds a budget (docs/operations.md#retention).
 * Each argument is a SQL expression of the statement: the owner, the currency, and `since` (a timestamptz).
 */
export function spentSinceSql(owner: string, currency: string, since: string): string {
  return `((SELECT COALESCE(sum(a.cost), 0) FROM jobs j JOIN attempts a ON a.job_id = j.id
             WHERE j.owner_id = ${owner} AND a.cost_currency = ${currency} AND a.started_at >= ${since})
         + (SELECT COALESCE(sum(u.cost), 0) FROM purged_usage u
             WHERE u.owner_id = ${owner} AND u.currency = ${currency} AND u.day >= ${since}))`;
}
