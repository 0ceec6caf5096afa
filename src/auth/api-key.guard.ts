import { CanActivate, ExecutionContext, Injectable } from '@nestjs/common';
import { Reflector } from '@nestjs/core';

import { DomainError } from '../common/domain.errors.js';
import { ApiKeysService } from './api-keys.service.js';
import { ANY_SCOPE_KEY, type AuthenticatedRequest, PUBLIC_KEY, SCOPES_KEY } from './auth.decorators.js';
import type { Scope } from './scopes.js';

const BEARER = /^Bearer +([\x21-\x7e]{1,512})$/i; // RFC 9110: the scheme is case-insensitive

export class UnauthorizedError extends DomainError {
  constructor() {
    super('unauthorized', 401, 'A valid API key is required: Authorization: Bearer <key>.');
  }
}

export class ForbiddenError extends DomainError {
  constructor(scopes: Scope[], any = false) {
    super('forbidden', 403, `This API key lacks the scope ${scopes.join(any ? ' or ' : ', ')}.`);
  }
}

/** Resolves the owner from the API key and checks the handler's scopes. Global: routes opt out with @Public(). */
@Injectable()
export class ApiKeyGuard implements CanActivate {
  constructor(
    private readonly reflector: Reflector,
    private readonly apiKeys: ApiKeysService,
  ) {}

  async canActivate(context: ExecutionContext): Promise<boolean> {
    const targets = [context.getHandler(), context.getClass()];
    if (this.reflector.getAllAndOverride<boolean>(PUBLIC_KEY, targets)) return true;
    const request = context
      .switchToHttp()
      .getRequest<AuthenticatedRequest & { headers: Record<string, string | string[] | undefined> }>();
    const header = request.headers.authorization;
    const match = typeof header === 'string' ? BEARER.exec(header) : null;
    if (!match) throw new UnauthorizedError();
    const principal = await this.apiKeys.authenticate(match[1]);
    if (!principal) throw new UnauthorizedError();
    const needed = this.reflector.getAllAndOverride<Scope[] | undefined>(SCOPES_KEY, targets) ?? [];
    const missing = needed.filter((scope) => !principal.scopes.includes(scope));
    if (missing.length) throw new ForbiddenError(missing);
    const anyOf = this.reflector.getAllAndOverride<Scope[] | undefined>(ANY_SCOPE_KEY, targets);
    if (anyOf && !anyOf.some((scope) => principal.scopes.includes(scope))) throw new ForbiddenError(anyOf, true);
    request.principal = principal;
    return true;
  }
}
