import { Injectable, Logger, type OnApplicationBootstrap } from '@nestjs/common';

import { ValidationFailedError } from '../common/domain.errors.js';
import { isDatabaseUnavailable } from '../database/pg-errors.js';
import { CatalogService } from '../providers/catalog.service.js';
import { type UsageGroupBy, UsageRepository } from './usage.repository.js';
import type { UsageView } from './usage.view.js';

@Injectable()
export class UsageService implements OnApplicationBootstrap {
  private readonly logger = new Logger(UsageService.name);

  constructor(
    private readonly usage: UsageRepository,
    private readonly catalog: CatalogService,
  ) {}

  /** The catalog's prices, copied where the attempts trigger reads them; a failure leaves the last prices. */
  async onApplicationBootstrap(): Promise<void> {
    const providers = this.catalog.listProviders();
    const priced = providers.flatMap((p) => (p.pricing ? [{ provider: p.name, pricing: p.pricing }] : []));
    const unpriced = providers.filter((p) => !p.pricing).map((p) => p.name);
    try {
      await this.usage.syncPrices(priced, unpriced);
    } catch (error) {
      if (!isDatabaseUnavailable(error)) throw error;
      this.logger.warn({ msg: 'prices not synced: database unavailable; attempts are priced by the last synced list' });
    }
  }

  async spend(
    ownerId: string,
    from: string | undefined,
    to: string | undefined,
    groupBy: UsageGroupBy,
  ): Promise<UsageView> {
    const now = new Date();
    const start = from ? new Date(from) : new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1));
    const end = to ? new Date(to) : now;
    if (!(start < end)) throw new ValidationFailedError([{ field: 'from', message: 'must be before to' }]);
    const groups = await this.usage.spend(ownerId, start, end, groupBy);
    return { from: start.toISOString(), to: end.toISOString(), groupBy, groups };
  }
}
