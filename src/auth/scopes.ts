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

/** The authenticated principal behind a request: the owner comes from the API key, never from the body. */
export interface Principal {
  keyId: string;
  ownerId: string;
  scopes: Scope[];
}
