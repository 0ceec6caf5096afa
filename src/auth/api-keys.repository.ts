import { Injectable } from '@nestjs/common';
import { DataSource } from 'typeorm';
import type { Principal, Scope } from './scopes.js';

@Injectable()
export class ApiKeysRepository {
  constructor(private readonly dataSource: DataSource) {}

  async insertKey(ownerId: string, keyHash: string, scopes: Scope[]): Promise<string> {
    const rows: Array<{ id: string }> = await this.dataSource.query(
      'INSERT INTO api_keys (owner_id, key_hash, scopes) VALUES ($1, $2, $3) RETURNING id',
      [ownerId, keyHash, scopes],
    );
    return rows[0].id;
  }

  async findActiveByHash(keyHash: string): Promise<Principal | undefined> {
    const rows: Array<{ id: string; owner_id: string; scopes: Scope[] }> = await this.dataSource.query(
      'SELECT id, owner_id, scopes FROM api_keys WHERE key_hash = $1 AND revoked_at IS NULL',
      [keyHash],
    );
    const row = rows[0];
    return row && { keyId: row.id, ownerId: row.owner_id, scopes: row.scopes };
  }

  async countKeys(): Promise<number> {
    const rows: Array<{ n: number }> = await this.dataSource.query('SELECT count(*)::int AS n FROM api_keys');
    return rows[0].n;
  }
}
