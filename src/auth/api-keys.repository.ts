import { Injectable } from '@nestjs/common';
import { DataSource } from 'typeorm';

import { rowsOf, run } from '../database/transactions.js';
import {
  ACTIVE_BY_HASH,
  COUNT_KEYS,
  INSERT_FIRST_KEY,
  INSERT_KEY,
  LIST_KEYS,
  LOCK_KEYS,
  REVOKE_KEY,
  TOUCH,
} from './api-keys.sql.js';
import type { Principal, Scope } from './scopes.js';

/** A key as `apikey list` shows it: never the key, never its hash. */
export interface ApiKeyRecord {
  id: string;
  ownerId: string;
  scopes: Scope[];
  createdAt: Date;
  expiresAt: Date | null;
  lastUsedAt: Date | null;
  revokedAt: Date | null;
}

interface ApiKeyRow {
  id: string;
  owner_id: string;
  scopes: Scope[];
  created_at: Date;
  expires_at: Date | null;
  last_used_at: Date | null;
  revoked_at: Date | null;
}

const recordOf = (row: ApiKeyRow): ApiKeyRecord => ({
  id: row.id,
  ownerId: row.owner_id,
  scopes: row.scopes,
  createdAt: row.created_at,
  expiresAt: row.expires_at,
  lastUsedAt: row.last_used_at,
  revokedAt: row.revoked_at,
});

@Injectable()
export class ApiKeysRepository {
  constructor(private readonly dataSource: DataSource) {}

  async insertKey(ownerId: string, keyHash: string, scopes: Scope[], expiresAt: Date | null = null): Promise<string> {
    const rows = await rowsOf(this.dataSource.manager, INSERT_KEY, [ownerId, keyHash, scopes, expiresAt]);
    return rows[0].id;
  }

  /** One lookup on UQ_api_keys_key_hash: the key if it is neither revoked nor expired, with its expiry. */
  async findActiveByHash(keyHash: string): Promise<{ principal: Principal; expiresAt: Date | null } | undefined> {
    const rows: Array<{ id: string; owner_id: string; scopes: Scope[]; expires_at: Date | null }> =
      await this.dataSource.query(ACTIVE_BY_HASH.text, [keyHash]);
    const row = rows[0];
    return (
      row && { principal: { keyId: row.id, ownerId: row.owner_id, scopes: row.scopes }, expiresAt: row.expires_at }
    );
  }

  /** Records use at most once a minute per key, whichever replica asks: the WHERE makes the others no-ops. */
  async touchLastUsed(id: string): Promise<void> {
    await this.dataSource.query(TOUCH.text, [id]);
  }

  async listKeys(): Promise<ApiKeyRecord[]> {
    const rows = await rowsOf<ApiKeyRow>(this.dataSource.manager, LIST_KEYS);
    return rows.map(recordOf);
  }

  /** Revokes once: the first revocation's time stays. Undefined when no key has this id. */
  async revokeKey(id: string): Promise<ApiKeyRecord | undefined> {
    const rows = await rowsOf<ApiKeyRow>(this.dataSource.manager, REVOKE_KEY, [id]);
    return rows[0] && recordOf(rows[0]);
  }

  /**
   * Inserts the first key, only while the table is empty: the lock makes two bootstraps started together (two
   * replicas, a retried Job) create one key between them. Returns the id, or undefined when a key existed.
   */
  async insertFirstKey(ownerId: string, keyHash: string, scopes: Scope[]): Promise<string | undefined> {
    return this.dataSource.transaction(async (manager) => {
      await run(manager, LOCK_KEYS);
      const rows = await rowsOf(manager, INSERT_FIRST_KEY, [ownerId, keyHash, scopes]);
      return rows[0]?.id;
    });
  }

  async countKeys(): Promise<number> {
    const rows = await rowsOf(this.dataSource.manager, COUNT_KEYS, []);
    return rows[0].n;
  }
}
