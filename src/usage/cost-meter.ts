import { Injectable } from '@nestjs/common';
import { Counter } from 'prom-client';

import type { Usage } from '../ledger/attempt.types.js';
import { MetricsService } from '../metrics/metrics.service.js';
import { CatalogService } from '../providers/catalog.service.js';

/** The price of a usage under a pricing: the formula the attempts trigger applies (docs/operations.md#cost). */
export function priceOf(usage: Usage, pricing: { inputPerMTok: number; outputPerMTok: number }): number {
  return (
    Math.round(
      ((usage.promptTokens * pricing.inputPerMTok + usage.completionTokens * pricing.outputPerMTok) / 1e6) * 1e8,
    ) / 1e8
  );
}

/** `onejob_cost_total{provider,outcome}`: spend as it is recorded, after commit, in the provider's currency. */
@Injectable()
export class CostMeter {
  private readonly cost: Counter<'provider' | 'outcome'>;

  constructor(
    metrics: MetricsService,
    private readonly catalog: CatalogService,
  ) {
    this.cost = new Counter({
      name: 'onejob_cost_total',
      help:
        "Cost of attempts with usage, in the provider's pricing currency, " +
        'by provider and outcome (won, discarded, failed).',
      labelNames: ['provider', 'outcome'],
      registers: [metrics.registry],
    });
  }

  record(provider: string, usage: Usage | undefined, outcome: 'won' | 'discarded' | 'failed'): void {
    const pricing = this.catalog.provider(provider)?.pricing;
    if (!usage || !pricing) return;
    this.cost.inc({ provider, outcome }, priceOf(usage, pricing));
  }
}
