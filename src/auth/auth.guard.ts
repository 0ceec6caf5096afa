import { CanActivate, ExecutionContext, Injectable } from '@nestjs/common';
import { Reflector } from '@nestjs/core';

import { ValidationFailedError } from '../common/domain.errors.js';
import { wantsEventStream } from '../common/event-stream-accept.js';
import { ApiKeysService } from './api-keys.service.js';
import {
  ANY_SCOPE_KEY,
  type AuthenticatedRequest,
  PUBLIC_KEY,
  SCOPES_KEY,
  STREAM_TOKEN_KEY,
} from './auth.decorators.js';
import { ForbiddenError, UnauthorizedError } from './auth.errors.js';
import { JwtVerifier } from './jwt-verifier.js';
import type { Principal, Scope, StreamGrant } from './scopes.js';
import { StreamTokensService } from './stream-tokens.service.js';

// RFC 9110: the scheme is case-insensitive. 8 KiB: an IdP's access token or a projected service-account token is
// one to three KiB; Node refuses all headers past 16 KiB before this runs.
const BEARER = /^Bearer +([\x21-\x7e]{1,8192})$/i;

type GuardedRequest = AuthenticatedRequest & {
  headers: Record<string, string | string[] | undefined>;
  query?: Record<string, unknown>;
  params?: Record<string, string | undefined>;
};

/**
 * Resolves every request's principal before any handler runs, and checks the handler's scopes (I15). Global:
 * routes opt out with @Public(). The credential is an API key (`oj_`), else a JWT of a configured issuer, in
 * `Authorization: Bearer`; or, on a stream route only, a stream token for that very stream as `?access_token=`.
 */
@Injectable()
export class AuthGuard implements CanActivate {
  constructor(
    private readonly reflector: Reflector,
    private readonly apiKeys: ApiKeysService,
    private readonly jwts: JwtVerifier,
    private readonly streamTokens: StreamTokensService,
  ) {}

  async canActivate(context: ExecutionContext): Promise<boolean> {
    const targets = [context.getHandler(), context.getClass()];
    if (this.reflector.getAllAndOverride<boolean>(PUBLIC_KEY, targets)) return true;
    const request = context.switchToHttp().getRequest<GuardedRequest>();
    const streamKind = this.reflector.getAllAndOverride<StreamGrant['kind'] | undefined>(STREAM_TOKEN_KEY, targets);
    const accessToken = streamKind ? request.query?.access_token : undefined;
    const principal =
      accessToken === undefined
        ? await this.bearer(request.headers.authorization)
        : await this.streamToken(request, accessToken, streamKind!);
    const needed = this.reflector.getAllAndOverride<Scope[] | undefined>(SCOPES_KEY, targets) ?? [];
    const missing = needed.filter((scope) => !principal.scopes.includes(scope));
    if (missing.length) throw new ForbiddenError(missing);
    const anyOf = this.reflector.getAllAndOverride<Scope[] | undefined>(ANY_SCOPE_KEY, targets);
    if (anyOf && !anyOf.some((scope) => principal.scopes.includes(scope))) throw new ForbiddenError(anyOf, true);
    request.principal = principal;
    return true;
  }

  private async bearer(header: string | string[] | undefined): Promise<Principal> {
    const match = typeof header === 'string' ? BEARER.exec(header) : null;
    if (!match) throw new UnauthorizedError();
    const token = match[1];
    if (token.startsWith('oj_')) return this.apiKeys.authenticate(token);
    if (!this.jwts.enabled) throw new UnauthorizedError('A valid API key is required: Authorization: Bearer <key>.');
    return this.jwts.verify(token);
  }

  /** A stream token opens the one stream it was made for, as a stream, and nothing else (I15). */
  private async streamToken(request: GuardedRequest, token: unknown, kind: StreamGrant['kind']): Promise<Principal> {
    if (request.headers.authorization !== undefined) {
      throw new ValidationFailedError([
        { field: 'access_token', message: 'must not be sent with an Authorization header (one credential a request)' },
      ]);
    }
    if (typeof token !== 'string') {
      throw new ValidationFailedError([{ field: 'access_token', message: 'must be given once' }]);
    }
    const principal = await this.streamTokens.authenticate(token);
    const id = request.params?.id?.toLowerCase();
    if (principal.stream?.kind !== kind || principal.stream.id !== id) {
      throw new UnauthorizedError('This stream token opens another stream.');
    }
    if (!wantsEventStream(request.headers.accept as string | undefined)) {
      throw new UnauthorizedError('A stream token opens its stream only: send Accept: text/event-stream.');
    }
    return principal;
  }
}
