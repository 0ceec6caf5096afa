import { randomBytes } from 'node:crypto';

import { Injectable, Logger, type OnModuleDestroy, Optional } from '@nestjs/common';

import { sha256Hex } from '../common/canonical-json.js';
import { PgNotifications } from '../database/pg-notifications.js';
import { type ApiKeyRecord, ApiKeysRepository } from './api-keys.repository.js';
import { API_KEYS_CHANNEL } from './api-keys.sql.js';
import { KeyRevokedError, TokenExpiredError, UnauthorizedError } from './auth.errors.js';
import type { Principal, Scope } from './scopes.js';

const TOUCH_EVERY_MS = 60_000;
const TOUCHED_MAX = 10_000;
/** A bound on any cached key's age, beside the revocation NOTIFY that normally drops it. */
const CACHE_TTL_MS = 60_000;
const CACHE_MAX = 10_000;

const newKey = () => `oj_${randomBytes(32).toString('base64url')}`;

interface CachedKey {
  principal: Principal;
  expiresAt: number;
  cachedUntil: number;
}

@Injectable()
export class ApiKeysService implements OnModuleDestroy {
  private readonly logger = new Logger('ApiKeys');
  /**
   * Key id -> when this process last recorded its use. Only the `last_used_at` write is throttled here; who the key
   * is and whether it still works is read from the database on every request, so a revocation holds at once.
   */
  private readonly touched = new Map<string, number>();
  /**
   * Key hash -> principal, used only while this process's LISTEN session is up: a revocation NOTIFYs in its own
   * transaction (ApiKeysRepository.revokeKey), every replica drops its cache on it, and while the session is down
   * (a notification could be missed) every request reads the database. `generation` guards the race where a lookup
   * that started before a revocation would cache the key after the drop.
   */
  private readonly cache = new Map<string, CachedKey>();
  private generation = 0;
  /** Key id -> what ends when it is revoked (open streams). */
  private readonly watchers = new Map<string, Set<() => void>>();
  private recheckTimer?: NodeJS.Timeout;

  constructor(
    private readonly keys: ApiKeysRepository,
    /** Absent in the CLI, which authenticates nothing: then nothing is cached. */
    @Optional() private readonly notifications?: PgNotifications,
  ) {
    notifications?.subscribe(API_KEYS_CHANNEL, (keyId) => {
      this.dropCache();
      // A revocation by hand (`pg_notify('onejob_api_keys', '')`) names no key: every watched key is read again.
      if (keyId) this.revoked(keyId);
      else void this.recheck();
    });
    notifications?.onStateChange(() => {
      this.dropCache();
      void this.recheck();
    });
  }

  /** Creates a key and returns it in clear: the only time it exists outside the caller's hands. */
  async create(ownerId: string, scopes: Scope[], expiresAt: Date | null = null): Promise<{ id: string; key: string }> {
    const key = newKey();
    const id = await this.keys.insertKey(ownerId, sha256Hex(key), scopes, expiresAt);
    return { id, key };
  }

  /**
   * The first key of a fresh database (the embedded demo, a container's bootstrap): `key` when given (an operator's
   * secret, `oj_` and 32 or more URL-safe characters), else a new one. Undefined when any key exists already.
   */
  async createFirst(
    ownerId: string,
    scopes: Scope[],
    key: string = newKey(),
  ): Promise<{ id: string; key: string } | undefined> {
    const id = await this.keys.insertFirstKey(ownerId, sha256Hex(key), scopes);
    return id === undefined ? undefined : { id, key };
  }

  /**
   * The principal of a key, or the refusal: unknown (`unauthorized`), revoked (`key_revoked`), expired
   * (`token_expired`). Only keys that work are cached.
   */
  async authenticate(key: string): Promise<Principal> {
    const hash = sha256Hex(key);
    const now = Date.now();
    const cached = this.cache.get(hash);
    if (cached && cached.cachedUntil > now && cached.expiresAt > now && this.notifications?.listening) {
      this.touch(cached.principal.actor.keyId!);
      return cached.principal;
    }
    const generation = this.generation;
    const found = await this.keys.findByHash(hash);
    if (!found || found.revoked || found.expired) {
      this.cache.delete(hash);
      if (found?.revoked) throw new KeyRevokedError();
      if (found?.expired) throw new TokenExpiredError('API key');
      throw new UnauthorizedError();
    }
    const principal: Principal = {
      ownerId: found.ownerId,
      scopes: found.scopes,
      actor: { ownerId: found.ownerId, keyId: found.id, subject: null, issuer: null },
      expiresAt: found.expiresAt?.getTime() ?? null,
      revokedWith: found.id,
    };
    if (this.notifications?.listening && generation === this.generation) {
      if (this.cache.size >= CACHE_MAX) this.cache.clear();
      this.cache.set(hash, { principal, expiresAt: principal.expiresAt ?? Infinity, cachedUntil: now + CACHE_TTL_MS });
    }
    this.touch(found.id);
    return principal;
  }

  /**
   * Calls `revoked` once when the key is revoked (or expires), for as long as the returned function is not
   * called: what ends an open stream (docs/operations.md#live-streams). The revocation's NOTIFY ends it at once;
   * a recheck of every watched key (one query) runs when the LISTEN session changes state and every minute, so a
   * NOTIFY missed, or a revocation made with SQL, ends it within that.
   */
  watch(keyId: string, revoked: () => void): () => void {
    const set = this.watchers.get(keyId) ?? new Set<() => void>();
    set.add(revoked);
    this.watchers.set(keyId, set);
    this.recheckTimer ??= setInterval(() => void this.recheck(), CACHE_TTL_MS).unref();
    return () => {
      set.delete(revoked);
      if (!set.size && this.watchers.get(keyId) === set) this.watchers.delete(keyId);
      if (!this.watchers.size) {
        clearInterval(this.recheckTimer);
        this.recheckTimer = undefined;
      }
    };
  }

  private revoked(keyId: string): void {
    for (const end of this.watchers.get(keyId) ?? []) end();
  }

  private async recheck(): Promise<void> {
    const ids = [...this.watchers.keys()];
    if (!ids.length) return;
    try {
      const active = await this.keys.stillActive(ids);
      for (const id of ids) if (!active.has(id)) this.revoked(id);
    } catch (error) {
      // The database is away: the next recheck (or the session's return) asks again.
      this.logger.debug({ msg: 'API key recheck failed', error: (error as Error).message });
    }
  }

  onModuleDestroy(): void {
    clearInterval(this.recheckTimer);
  }

  private dropCache(): void {
    this.generation++;
    this.cache.clear();
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
    this.keys
      .touchLastUsed(keyId)
      .catch((error: Error) => this.logger.warn({ msg: 'could not record API key use', keyId, error: error.message }));
  }
}
