import { createParamDecorator, ExecutionContext, SetMetadata } from '@nestjs/common';
import type { Principal, Scope } from './scopes.js';

export const SCOPES_KEY = 'onejob:scopes';
export const PUBLIC_KEY = 'onejob:public';

/** The scopes a handler needs; the guard answers 403 when the key lacks one. */
export const RequireScopes = (...scopes: Scope[]) => SetMetadata(SCOPES_KEY, scopes);
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
