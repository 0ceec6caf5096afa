import { dynamic, statement } from '../database/prepared-statements.js';

/** The price list the attempts trigger reads, and an owner's spend: their statements (docs/sql/usage.sql). */

export type UsageGroupBy = 'operation' | 'provider' | 'day';

const GROUP_KEYS: Record<UsageGroupBy, string> = {
  operation: 'j.operation',
  provider: 'a.provider',
  day: `to_char(a.started_at AT TIME ZONE 'UTC', 'YYYY-MM-DD')`,
};

/** The same keys on what the retention purge kept of deleted attempts (purged_usage). */
const PURGED_KEYS: Record<UsageGroupBy, string> = {
  operation: 'u.operation',
  provider: 'u.provider',
  day: `to_char(u.day AT TIME ZONE 'UTC', 'YYYY-MM-DD')`,
};

/** numeric and bigint sums arrive as text. */
export interface SpendRow {
  key: string;
  currency: string | null;
  attempts: number;
  prompt_tokens: string;
  completion_tokens: string;
  cost: string;
  discarded_cost: string;
}

/** The prices of providers the catalog names unpriced. */
export const REMOVE_PROVIDER_PRICES = statement<[providers: string[]]>(
  'remove_provider_prices',
  `DELETE FROM provider_prices WHERE provider = ANY($1::text[])`,
);

/** The catalog's priced providers, one array per column; a row that says the same is left alone. */
export const UPSERT_PROVIDER_PRICES = statement<
  [providers: string[], inputPerMTok: number[], outputPerMTok: number[], currencies: string[]]
>(
  'upsert_provider_prices',
  `INSERT INTO provider_prices (provider, input_per_mtok, output_per_mtok, currency)
         SELECT * FROM unnest($1::text[], $2::numeric[], $3::numeric[], $4::text[])
         ON CONFLICT (provider) DO UPDATE SET input_per_mtok = EXCLUDED.input_per_mtok,
           output_per_mtok = EXCLUDED.output_per_mtok,
                currency = EXCLUDED.currency, updated_at = now()
          WHERE (provider_prices.input_per_mtok, provider_prices.output_per_mtok, provider_prices.currency)
                IS DISTINCT FROM (EXCLUDED.input_per_mtok, EXCLUDED.output_per_mtok, EXCLUDED.currency)`,
);

/**
 * Owner $1's attempts started in [$2, $3), grouped by the call's key, per currency (unpriced attempts under a null
 * currency): SpendRow's. Those the retention purge deleted count from what it kept of them (purged_usage), by the
 * UTC day they started: a day counts when it begins in [$2, $3), as the budget counts it (src/ledger/spend.ts).
 * Shown grouped by day.
 */
export const OWNER_SPEND = dynamic(
  'owner_spend',
  (groupBy: UsageGroupBy) => {
    return `SELECT key, currency, sum(attempts)::int AS attempts, sum(prompt_tokens) AS prompt_tokens,
              sum(completion_tokens) AS completion_tokens, sum(cost) AS cost, sum(discarded_cost) AS discarded_cost
         FROM (SELECT ${GROUP_KEYS[groupBy]} AS key, a.cost_currency AS currency, count(*) AS attempts,
                      COALESCE(sum((a.usage->>'promptTokens')::bigint), 0) AS prompt_tokens,
                      COALESCE(sum((a.usage->>'completionTokens')::bigint), 0) AS completion_tokens,
                      COALESCE(sum(a.cost), 0) AS cost,
                      COALESCE(sum(a.cost) FILTER (WHERE a.outcome = 'discarded'), 0) AS discarded_cost
                 FROM attempts a JOIN jobs j ON j.id = a.job_id
                WHERE j.owner_id = $1 AND a.started_at >= $2 AND a.started_at < $3
                GROUP BY 1, 2
               UNION ALL
               SELECT ${PURGED_KEYS[groupBy]}, u.currency, sum(u.attempts), sum(u.prompt_tokens),
                      sum(u.completion_tokens), sum(u.cost), sum(u.discarded_cost)
                 FROM purged_usage u
                WHERE u.owner_id = $1 AND u.day >= $2 AND u.day < $3
                GROUP BY 1, 2) s
        GROUP BY 1, 2
        ORDER BY 1, 2`;
  },
  'day',
);
