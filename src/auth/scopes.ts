/**
 * `attempts:resolve` and `ops:read` are operator scopes: they act across owners (docs/design.md#operators).
 * `providers:certify`, `budgets:write` and `owners:write` are admins': a budget, a weight and a cap are limits
 * set on an owner, not by it.
 */
export const SCOPES = [
  'jobs:write',
  'jobs:read',
  'attempts:resolve',
  'providers:certify',
  'ops:read',
  'budgets:write',
  'owners:write',
] as const;
export type Scope = (typeof SCOPES)[number];

export function isScope(value: string): value is Scope {
  return (SCOPES as readonly string[]).includes(value);
}

/**
 * Who acted, as the audit records write it (`job_events`, `owner_share_changes`): the API key's id, or the
 * token's subject and issuer.
 */
export interface Actor {
  ownerId: string;
  keyId: string | null;
  subject: string | null;
  issuer: string | null;
}

/** The one stream a stream token opens (docs/operations.md#stream-tokens). */
export interface StreamGrant {
  kind: 'job' | 'batch';
  id: string;
}

/**
 * The authenticated principal behind a request, however it proved who it is (an API key, a JWT of a configured
 * issuer, a stream token): the owner comes from the credential, never from the body, and every wall (I7, the
 * scopes) reads only `ownerId` and `scopes` (I15).
 */
export interface Principal {
  ownerId: string;
  scopes: Scope[];
  actor: Actor;
  /** When the credential stops working (ms since the epoch); null: never by time alone (a key without expiry). */
  expiresAt: number | null;
  /** The API key whose revocation ends this credential: the key itself, or the key a stream token was made with. */
  revokedWith: string | null;
  /** Set on a stream token's principal only: the one stream it opens. */
  stream?: StreamGrant;
}
