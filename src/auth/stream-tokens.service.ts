import { randomBytes } from 'node:crypto';

import { Inject, Injectable } from '@nestjs/common';
import { DataSource } from 'typeorm';

import { sha256Hex } from '../common/canonical-json.js';
import { type AppConfig, appConfig } from '../config/app.config.js';
import { rowsOf } from '../database/transactions.js';
import { KeyRevokedError, TokenExpiredError, UnauthorizedError } from './auth.errors.js';
import { isScope, type Principal, type Scope, type StreamGrant } from './scopes.js';
import { INSERT_STREAM_TOKEN, STREAM_TOKEN_BY_HASH } from './stream-tokens.sql.js';

/** A stream token: `ojs_` and 32 random bytes, URL-safe. Never an API key (`oj_`), never a JWT. */
export const STREAM_TOKEN_PATTERN = /^ojs_[A-Za-z0-9_-]{43}$/;
/** The scopes a stream token may carry: the ones that open a stream (its owner's, or an operator's). */
const STREAM_SCOPES: Scope[] = ['jobs:read', 'ops:read'];

export interface IssuedStreamToken {
  token: string;
  expiresAt: Date;
}

/**
 * Stream tokens (docs/operations.md#stream-tokens): what a browser's EventSource, which cannot send an
 * Authorization header, opens one stream with, as `?access_token=`. A token is bound to one stream (a job's or a
 * batch's), carries the reading scopes of the principal that made it and nothing else, lives at most
 * STREAM_TOKEN_TTL_SECONDS (900) and never past that principal's own credential; revoking the key it was made
 * with refuses it too. Only its SHA-256 is stored.
 */
@Injectable()
export class StreamTokensService {
  constructor(
    private readonly dataSource: DataSource,
    @Inject(appConfig.KEY) private readonly config: AppConfig,
  ) {}

  async issue(principal: Principal, stream: StreamGrant): Promise<IssuedStreamToken> {
    const token = `ojs_${randomBytes(32).toString('base64url')}`;
    const ttlMs = this.config.streamTokenTtlSeconds * 1000;
    const expiresAt = new Date(Math.min(Date.now() + ttlMs, principal.expiresAt ?? Infinity));
    const { actor } = principal;
    const rows = await rowsOf(this.dataSource.manager, INSERT_STREAM_TOKEN, [
      sha256Hex(token),
      principal.ownerId,
      principal.scopes.filter((scope) => STREAM_SCOPES.includes(scope)),
      stream.kind,
      stream.id,
      actor.keyId,
      actor.subject,
      actor.issuer,
      expiresAt,
    ]);
    return { token, expiresAt: rows[0].expires_at };
  }

  /** The principal of a stream token, bound to its one stream; refused when unknown, expired, or its key revoked. */
  async authenticate(token: string): Promise<Principal> {
    if (!STREAM_TOKEN_PATTERN.test(token)) throw new UnauthorizedError('The access_token is not a stream token.');
    const [row] = await rowsOf(this.dataSource.manager, STREAM_TOKEN_BY_HASH, [sha256Hex(token)]);
    if (!row) throw new UnauthorizedError('The access_token is not a stream token.');
    if (row.key_revoked) throw new KeyRevokedError();
    if (row.expired || row.key_expired) throw new TokenExpiredError('stream token');
    return {
      ownerId: row.owner_id,
      scopes: row.scopes.filter(isScope),
      actor: { ownerId: row.owner_id, keyId: row.key_id, subject: row.actor_subject, issuer: row.actor_issuer },
      expiresAt: new Date(row.expires_at).getTime(),
      revokedWith: row.key_id,
      stream: { kind: row.stream_kind, id: row.stream_id },
    };
  }
}
