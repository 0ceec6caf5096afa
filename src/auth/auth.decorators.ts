import { applyDecorators, createParamDecorator, ExecutionContext, SetMetadata } from '@nestjs/common';
import { ApiSecurity } from '@nestjs/swagger';

import type { Principal, Scope, StreamGrant } from './scopes.js';

export const SCOPES_KEY = 'onejob:scopes';
export const PUBLIC_KEY = 'onejob:public';
export const ANY_SCOPE_KEY = 'onejob:any-scope';
export const STREAM_TOKEN_KEY = 'onejob:stream-token';

/** The scopes a handler needs; the guard answers 403 when the key lacks one. */
export const RequireScopes = (...scopes: Scope[]) => SetMetadata(SCOPES_KEY, scopes);
/** The key needs at least one of these scopes (an owner's scope or its operator counterpart); 403 otherwise. */
export const RequireAnyScope = (...scopes: Scope[]) => SetMetadata(ANY_SCOPE_KEY, scopes);
/**
 * The stream route of one kind of resource (its `:id`): it also takes a stream token for that resource as
 * `?access_token=`, with `Accept: text/event-stream` (docs/operations.md#stream-tokens). No other route does.
 */
export const AcceptsStreamToken = (kind: StreamGrant['kind']) =>
  applyDecorators(SetMetadata(STREAM_TOKEN_KEY, kind), ApiSecurity('streamToken'));
/** A route that needs no API key (health, metrics). */
export const Public = () => SetMetadata(PUBLIC_KEY, true);

export interface AuthenticatedRequest {
  principal?: Principal;
}

/** The owner id the guard resolved from the credential (API key, JWT, stream token). */
export const OwnerId = createParamDecorator((_: unknown, context: ExecutionContext): string => {
  const request = context.switchToHttp().getRequest<AuthenticatedRequest>();
  return request.principal!.ownerId;
});

/**
 * The whole principal (owner, scopes, actor, expiry), for handlers whose answer depends on the scopes, records the
 * actor or follows the credential (a stream).
 */
export const CurrentPrincipal = createParamDecorator((_: unknown, context: ExecutionContext): Principal => {
  const request = context.switchToHttp().getRequest<AuthenticatedRequest>();
  return request.principal!;
});
