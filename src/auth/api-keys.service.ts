import { randomBytes } from 'node:crypto';
import { Injectable } from '@nestjs/common';
import { sha256Hex } from '../common/canonical-json.js';
import { ApiKeysRepository } from './api-keys.repository.js';
import type { Principal, Scope } from './scopes.js';

const CACHE_TTL_MS = 5_000;
const CACHE_MAX = 10_000;

@Injectable()
export class ApiKeysService {
  /** Hash -> principal for a few seconds: a revoked key stops working within CACHE_TTL_MS. */
  private readonly cache = new Map<string, { principal: Principal | undefined; until: number }>();

  constructor(private readonly keys: ApiKeysRepository) {}

  /** Creates a key and returns it in clear: the only time it exists outside the caller's hands. */
  async create(ownerId: string, scopes: Scope[]): Promise<{ id: string; key: string }> {
    const key = `oj_${randomBytes(32).toString('base64url')}`;
    const id = await this.keys.insertKey(ownerId, sha256Hex(key), scopes);
    return { id, key };
  }

  async authenticate(key: string): Promise<Principal | undefined> {
    const hash = sha256Hex(key);
    const now = Date.now();
    const cached = this.cache.get(hash);
    if (cached && cached.until > now) return cached.principal;
    const principal = await this.keys.findActiveByHash(hash);
    if (this.cache.size >= CACHE_MAX) this.cache.clear();
    this.cache.set(hash, { principal, until: now + CACHE_TTL_MS });
    return principal;
  }

  countKeys(): Promise<number> {
    return this.keys.countKeys();
  }
}
