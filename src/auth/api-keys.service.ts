import { randomBytes } from 'node:crypto';
import { Injectable, Logger } from '@nestjs/common';
import { sha256Hex } from '../common/canonical-json.js';
import { ApiKeysRepository, type ApiKeyRecord } from './api-keys.repository.js';
import type { Principal, Scope } from './scopes.js';

const TOUCH_EVERY_MS = 60_000;
const TOUCHED_MAX = 10_000;

@Injectable()
export class ApiKeysService {
  private readonly logger = new Logger('ApiKeys');
  /**
   * Key id -> when this process last recorded its use. Only the `last_used_at` write is throttled here; who the key
   * is and whether it still works is read from the database on every request, so a revocation holds at once.
   */
  private readonly touched = new Map<string, number>();

  constructor(private readonly keys: ApiKeysRepository) {}

  /** Creates a key and returns it in clear: the only time it exists outside the caller's hands. */
  async create(ownerId: string, scopes: Scope[], expiresAt: Date | null = null): Promise<{ id: string; key: string }> {
    const key = `oj_${randomBytes(32).toString('base64url')}`;
    const id = await this.keys.insertKey(ownerId, sha256Hex(key), scopes, expiresAt);
    return { id, key };
  }

  async authenticate(key: string): Promise<Principal | undefined> {
    const principal = await this.keys.findActiveByHash(sha256Hex(key));
    if (principal) this.touch(principal.keyId);
    return principal;
  }

  list(): Promise<ApiKeyRecord[]> {
    return this.keys.listKeys();
  }

  revoke(id: string): Promise<ApiKeyRecord | undefined> {
    return this.keys.revokeKey(id);
  }

  countKeys(): Promise<number> {
    return this.keys.countKeys();
  }

  /** Fire and forget: the request never waits on this write, and a failed write only loses a timestamp. */
  private touch(keyId: string): void {
    const now = Date.now();
    if ((this.touched.get(keyId) ?? 0) > now - TOUCH_EVERY_MS) return;
    if (this.touched.size >= TOUCHED_MAX) this.touched.clear();
    this.touched.set(keyId, now);
    this.keys.touchLastUsed(keyId).catch((error: Error) => this.logger.warn({ msg: 'could not record API key use', keyId, error: error.message }));
  }
}
