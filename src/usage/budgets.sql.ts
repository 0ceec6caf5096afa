import { statement } from '../database/prepared-statements.js';
import { spentSinceSql } from '../ledger/spend.js';

/** The owners' budgets' statements (docs/sql/budgets.sql). */

/** Every change to a budget NOTIFYs here at its commit (BudgetsService reloads). */
export const BUDGETS_CHANNEL = 'onejob_budgets';

export const LIST_BUDGETS = statement('list_budgets', `SELECT owner_id, monthly_limit, currency FROM owner_budgets`);

export const UPSERT_BUDGET = statement(
  'upsert_budget',
  `WITH b AS (
         INSERT INTO owner_budgets (owner_id, monthly_limit, currency) VALUES ($1, $2, $3)
         ON CONFLICT (owner_id) DO UPDATE SET monthly_limit = EXCLUDED.monthly_limit, currency = EXCLUDED.currency,
           updated_at = now()
         RETURNING owner_id
       )
       SELECT pg_notify('${BUDGETS_CHANNEL}', owner_id) FROM b`,
);

export const REMOVE_BUDGET = statement(
  'remove_budget',
  `WITH b AS (DELETE FROM owner_budgets WHERE owner_id = $1 RETURNING owner_id)
       SELECT owner_id, pg_notify('${BUDGETS_CHANNEL}', owner_id) FROM b`,
);

export const USED_SINCE = statement(
  'budget_used_since',
  `SELECT ${spentSinceSql('$1', '$2', '$3::timestamptz')} AS spent,
              (SELECT COALESCE(sum(GREATEST(j.reserved_cost
                       - COALESCE((SELECT sum(a.cost) FROM attempts a WHERE a.job_id = j.id AND a.cost_currency = $2),
                         0), 0)), 0)
                 FROM jobs j WHERE j.owner_id = $1 AND j.status IN ('pending', 'running', 'unknown')
                   AND j.reserved_currency = $2)
                AS reserved`,
);
