import { createParamDecorator, ExecutionContext, SetMetadata } from '@nestjs/common';

import type { Principal, Scope } from './scopes.js';

export const SCOPES_KEY = 'onejob:scopes';
export const PUBLIC_KEY = 'onejob:public';
export const ANY_SCOPE_KEY = 'onejob:any-scope';

/** The scopes a handler needs; the guard answers 403 when the key lacks one. */
export const RequireScopes = (...scopes: Scope[]) => SetMetadata(SCOPES_KEY, scopes);
/** The key needs at least one of these scopes (an owner's scope or its operator counterpart); 403 otherwise. */
export const RequireAnyScope = (...scopes: Scope[]) => SetMetadata(ANY_SCOPE_KEY, scopes);
/** A route that needs no API key (health, metrics). */
export const Public = () => SetMetadata(PUBLIC_KEY, true);

export interface AuthenticatedRequest {
  principal?: Principal;
}

/** The owner id the guard resolved from the API key. */
export const OwnerId = createParamDecorator((_: unknown, context: ExecutionContext): string => {
  const request = context.switchToHttp().getRequest<AuthenticatedRequest>();
  return request.principal!.ownerId;
});

/**
 * The whole principal (key id, owner, scopes), for handlers whose answer depends on the scopes or records the
 * actor.
 */
export const CurrentPrincipal = createParamDecorator((_: unknown, context: ExecutionContext): Principal => {
  const request = context.switchToHttp().getRequest<AuthenticatedRequest>();
  return request.principal!;
});
