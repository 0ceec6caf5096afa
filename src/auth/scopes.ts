export const SCOPES = ['jobs:write', 'jobs:read', 'attempts:resolve', 'providers:certify'] as const;
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
