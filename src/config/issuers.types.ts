/** The JWT issuers onejob trusts (AUTH_ISSUERS_FILE, docs/operations.md#tokens-from-your-identity-provider). */
export const JWT_ALGORITHMS = ['RS256', 'ES256', 'EdDSA'] as const;
export type JwtAlgorithm = (typeof JWT_ALGORITHMS)[number];

/** The owner a token maps to: one claim (by path), or a template of claims in double braces. */
export type OwnerMapping = { claim: string } | { template: string };

/**
 * The scopes a token maps to: a claim holding scopes or groups (a space-separated string or an array), each value
 * mapped through `map` to onejob scopes (without `map`, values that are onejob scopes count as themselves), or the
 * same scopes for every token of the issuer.
 */
export type ScopeMapping = { claim: string; map?: Record<string, string[]> } | { static: string[] };

/** The console's sign-in through this issuer (authorization code with PKCE, in the browser). */
export interface ConsoleSignIn {
  clientId: string;
  /** The scopes the console asks for (space-separated), `openid` among them. */
  scope: string;
}

export interface IssuerSpec {
  issuer: string;
  /** Absent: read from the issuer's /.well-known/openid-configuration. */
  jwksUri?: string;
  audience: string | string[];
  algorithms: JwtAlgorithm[];
  clockToleranceSec: number;
  /**
   * jose's createRemoteJWKSet: how long fetched keys are used before a refresh, the pause before a refetch for an
   * unknown kid, the bound on one fetch.
   */
  jwksCacheMaxAgeSec: number;
  jwksCooldownSec: number;
  jwksTimeoutMs: number;
  owner: OwnerMapping;
  scopes: ScopeMapping;
  console?: ConsoleSignIn;
}

export interface IssuersConfig {
  issuers: IssuerSpec[];
}
