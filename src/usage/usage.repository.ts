import { Injectable } from '@nestjs/common';
import { DataSource } from 'typeorm';

import type { PricingSpec } from '../config/catalog.types.js';
import { rowsOf, run } from '../database/transactions.js';
import {
  OWNER_SPEND,
  REMOVE_PROVIDER_PRICES,
  type SpendRow,
  UPSERT_PROVIDER_PRICES,
  type UsageGroupBy,
} from './usage.sql.js';

export type { UsageGroupBy } from './usage.sql.js';

export interface UsageRow {
  key: string;
  currency: string | null;
  attempts: number;
  promptTokens: number;
  completionTokens: number;
  cost: number;
  discardedCost: number;
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
        await run(manager, REMOVE_PROVIDER_PRICES, [unpriced]);
      }
      if (!priced.length) return;
      await run(manager, UPSERT_PROVIDER_PRICES, [
        priced.map((p) => p.provider),
        priced.map((p) => p.pricing.inputPerMTok),
        priced.map((p) => p.pricing.outputPerMTok),
        priced.map((p) => p.pricing.currency),
      ]);
    });
  }

  /** The owner's attempts started in [from, to), grouped, per currency (unpriced attempts under a null currency). */
  async spend(ownerId: string, from: Date, to: Date, groupBy: UsageGroupBy): Promise<UsageRow[]> {
    const rows = await rowsOf<SpendRow>(this.dataSource.manager, OWNER_SPEND.build(groupBy), [ownerId, from, to]);
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
