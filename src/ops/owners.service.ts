import { Injectable } from '@nestjs/common';

import type { Principal } from '../auth/scopes.js';
import { type OwnerShareRow, OwnerSharesRepository } from './owner-shares.repository.js';
import type { OwnerSharePageView, OwnerShareView } from './owners.view.js';

function toOwnerShareView(row: OwnerShareRow): OwnerShareView {
  return {
    ownerId: row.owner_id,
    weight: row.weight,
    maxConcurrency: row.max_concurrency,
    queued: row.queued,
    inFlight: row.in_flight,
    unknown: row.unknown,
    updatedAt: row.updated_at ? new Date(row.updated_at).toISOString() : null,
  };
}

/** Fair share settings (docs/design.md#fair-share): admins set an owner's weight and cap; operators read the queues. */
@Injectable()
export class OwnersService {
  constructor(private readonly shares: OwnerSharesRepository) {}

  async set(
    principal: Principal,
    ownerId: string,
    weight: number,
    maxConcurrency: number | null,
  ): Promise<OwnerShareView> {
    const row = await this.shares.set({
      ownerId,
      weight,
      maxConcurrency,
      actor: principal.actor,
    });
    return toOwnerShareView(row);
  }

  async list(limit: number): Promise<OwnerSharePageView> {
    return { items: (await this.shares.list(limit)).map(toOwnerShareView) };
  }
}
