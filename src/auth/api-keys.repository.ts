import { Injectable } from '@nestjs/common';
import { DataSource } from 'typeorm';

import { rowsOf, run } from '../database/transactions.js';
import {
  COUNT_KEYS,
  INSERT_FIRST_KEY,
  INSERT_KEY,
  KEY_BY_HASH,
  LIST_KEYS,
  LOCK_KEYS,
  REVOKE_KEY,
  STILL_ACTIVE,
  TOUCH,
} from './api-keys.sql.js';
import type { Scope } from './scopes.js';

/** A key as a request finds it by its hash: revoked and expired ones too (each is refused with its own code). */
export interface FoundKey {
  id: string;
  ownerId: string;
  scopes: Scope[];
  expiresAt: Date | null;
  revoked: boolean;
  expired: boolean;
}

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

  /** One lookup on UQ_api_keys_key_hash. */
  async findByHash(keyHash: string): Promise<FoundKey | undefined> {
    const rows: Array<{
      id: string;
      owner_id: string;
      scopes: Scope[];
      expires_at: Date | null;
      revoked: boolean;
      expired: boolean;
    }> = await this.dataSource.query(KEY_BY_HASH.text, [keyHash]);
    const row = rows[0];
    return (
      row && {
        id: row.id,
        ownerId: row.owner_id,
        scopes: row.scopes,
        expiresAt: row.expires_at,
        revoked: row.revoked,
        expired: row.expired,
      }
    );
  }

  /** Of `ids`, the keys still neither revoked nor expired. */
  async stillActive(ids: string[]): Promise<Set<string>> {
    const rows = await rowsOf(this.dataSource.manager, STILL_ACTIVE, [ids]);
    return new Set(rows.map((row) => row.id));
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
