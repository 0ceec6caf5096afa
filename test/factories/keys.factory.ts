import type { DataSource } from 'typeorm';

import { ApiKeysRepository } from '../../src/auth/api-keys.repository.js';
import { ApiKeysService } from '../../src/auth/api-keys.service.js';
import { type Scope, SCOPES } from '../../src/auth/scopes.js';

export interface KeyOverrides {
  ownerId?: string;
  scopes?: Scope[];
  expiresAt?: Date | null;
}

export interface CreatedKey {
  id: string;
  /** The key in clear, for `Authorization: Bearer`. */
  key: string;
  ownerId: string;
}

let seq = 0;

/** An API key made the way `onejob apikey create` makes one (ApiKeysService.create): every scope by default. */
export async function createKey(db: DataSource, overrides: KeyOverrides = {}): Promise<CreatedKey> {
  const ownerId = overrides.ownerId ?? `owner-${process.pid}-${++seq}`;
  const service = new ApiKeysService(new ApiKeysRepository(db));
  const { id, key } = await service.create(ownerId, overrides.scopes ?? [...SCOPES], overrides.expiresAt ?? null);
  return { id, key, ownerId };
}
