import { Injectable } from '@nestjs/common';
import { DataSource } from 'typeorm';

import type { PricingSpec } from '../config/catalog.types.js';
import { rowsOf } from '../database/transactions.js';

export type UsageGroupBy = 'operation' | 'provider' | 'day';

export interface UsageRow {
  key: string;
  currency: string | null;
  attempts: number;
  promptTokens: number;
  completionTokens: number;
  cost: number;
  discardedCost: number;
}

const GROUP_KEYS: Record<UsageGroupBy, string> = {
  operation: 'j.operation',
  provider: 'a.provider',
  day: `to_char(a.started_at AT TIME ZONE 'UTC', 'YYYY-MM-DD')`,
};

/** numeric and bigint sums arrive as text. */
interface SpendRow {
  key: string;
  currency: string | null;
  attempts: number;
  prompt_tokens: string;
  completion_tokens: string;
  cost: string;
  discarded_cost: string;
}

/** The price list the attempts trigger reads, and an owner's spend. */
@Injectable()
export class UsageRepository {
  constructor(private readonly dataSource: DataSource) {}

  /**
   * Makes provider_prices say what this catalog says about its providers: priced ones upserted, unpriced ones
   * removed. Providers this catalog does not name are left alone (another replica's catalog may have them).
   */
  async syncPrices(priced: Array<{ provider: string; pricing: PricingSpec }>, unpriced: string[]): Promise<void> {
    await this.dataSource.transaction(async (manager) => {
      if (unpriced.length) {
        await manager.query(`DELETE FROM provider_prices WHERE provider = ANY($1::text[])`, [unpriced]);
      }
      if (!priced.length) return;
      await manager.query(
        `INSERT INTO provider_prices (provider, input_per_mtok, output_per_mtok, currency)
         SELECT * FROM unnest($1::text[], $2::numeric[], $3::numeric[], $4::text[])
         ON CONFLICT (provider) DO UPDATE SET input_per_mtok = EXCLUDED.input_per_mtok,
           output_per_mtok = EXCLUDED.output_per_mtok,
                currency = EXCLUDED.currency, updated_at = now()
          WHERE (provider_prices.input_per_mtok, provider_prices.output_per_mtok, provider_prices.currency)
                IS DISTINCT FROM (EXCLUDED.input_per_mtok, EXCLUDED.output_per_mtok, EXCLUDED.currency)`,
        [
          priced.map((p) => p.provider),
          priced.map((p) => p.pricing.inputPerMTok),
          priced.map((p) => p.pricing.outputPerMTok),
          priced.map((p) => p.pricing.currency),
        ],
      );
    });
  }

  /** The owner's attempts started in [from, to), grouped, per currency (unpriced attempts under a null currency). */
  async spend(ownerId: string, from: Date, to: Date, groupBy: UsageGroupBy): Promise<UsageRow[]> {
    const key = GROUP_KEYS[groupBy];
    const rows = await rowsOf<SpendRow>(
      this.dataSource.manager,
      `SELECT ${key} AS key, a.cost_currency AS currency, count(*)::int AS attempts,
              COALESCE(sum((a.usage->>'promptTokens')::bigint), 0) AS prompt_tokens,
              COALESCE(sum((a.usage->>'completionTokens')::bigint), 0) AS completion_tokens,
              COALESCE(sum(a.cost), 0) AS cost,
              COALESCE(sum(a.cost) FILTER (WHERE a.outcome = 'discarded'), 0) AS discarded_cost
         FROM attempts a JOIN jobs j ON j.id = a.job_id
        WHERE j.owner_id = $1 AND a.started_at >= $2 AND a.started_at < $3
        GROUP BY 1, 2
        ORDER BY 1, 2`,
      [ownerId, from, to],
    );
    return rows.map((r) => ({
      key: r.key,
      currency: r.currency,
      attempts: r.attempts,
      promptTokens: Number(r.prompt_tokens),
      completionTokens: Number(r.completion_tokens),
      cost: Number(r.cost),
      discardedCost: Number(r.discarded_cost),
    }));
  }
}
