import { DomainError } from '../common/domain.errors.js';
import type { Scope } from './scopes.js';

export class UnauthorizedError extends DomainError {
  constructor(detail = 'A valid credential is required: Authorization: Bearer <API key or JWT>.') {
    super('unauthorized', 401, detail);
  }
}

/** The key was revoked (or the key a stream token was made with): a code of its own, so a client stops retrying. */
export class KeyRevokedError extends DomainError {
  constructor() {
    super('key_revoked', 401, 'This API key was revoked.');
  }
}

/** The credential's time is up (a JWT past `exp`, a key or a stream token past its expiry): get a new one. */
export class TokenExpiredError extends DomainError {
  constructor(what = 'token') {
    super('token_expired', 401, `This ${what} has expired.`);
  }
}

export class ForbiddenError extends DomainError {
  constructor(scopes: Scope[], any = false) {
    super('forbidden', 403, `This credential lacks the scope ${scopes.join(any ? ' or ' : ', ')}.`);
  }
}
