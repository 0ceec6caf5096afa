import { Inject, Injectable, Logger } from '@nestjs/common';
import { createRemoteJWKSet, decodeJwt, errors, type JWTPayload, jwtVerify, type JWTVerifyGetKey } from 'jose';

import { safeErrorFields } from '../common/log-safe.js';
import type { IssuersConfig, IssuerSpec } from '../config/issuers.types.js';
import { TokenExpiredError, UnauthorizedError } from './auth.errors.js';
import { ownerOf, scopesOf, UnmappedOwnerError } from './claims.js';
import type { Principal } from './scopes.js';

export const ISSUERS = Symbol('ISSUERS');

/** A JWS in compact form: header.payload.signature, base64url (an empty signature is `alg: none`'s). */
const COMPACT_JWS = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*$/;
/** What was verified is reused this long at most (never past its `exp`): an RS256 verify per request is dear. */
const VERIFIED_TTL_MS = 60_000;
const VERIFIED_MAX = 10_000;

interface Verified {
  principal: Principal;
  until: number;
}

/** The endpoints an issuer's discovery document names (OpenID Connect Discovery 1.0). */
export interface IssuerEndpoints {
  jwksUri: string;
  authorizationEndpoint?: string;
  tokenEndpoint?: string;
}

/**
 * One configured issuer: its keys through jose's remote JWK set (its cache, its cooldown before a refetch for an
 * unknown `kid`, its timeout), found by discovery when `jwksUri` is not configured.
 */
class TrustedIssuer {
  private endpoints?: Promise<IssuerEndpoints>;
  private failedAt = -Infinity;
  private jwks?: ReturnType<typeof createRemoteJWKSet>;
  private refreshedAt = 0;

  constructor(
    readonly spec: IssuerSpec,
    private readonly logger: Logger,
  ) {}

  /**
   * The discovery document's endpoints, read once (a failure is retried after the JWKS cooldown, never per
   * request). Its `issuer` must be the configured one, as Discovery 1.0 §4.3 requires.
   */
  discover(): Promise<IssuerEndpoints> {
    if (!this.endpoints && Date.now() - this.failedAt < this.spec.jwksCooldownSec * 1000) {
      return Promise.reject(new UnauthorizedError("The token's issuer could not be reached to read its keys."));
    }
    this.endpoints ??= this.readDiscovery().catch((error: Error) => {
      this.endpoints = undefined;
      this.failedAt = Date.now();
      this.logger.warn({ msg: 'issuer discovery failed', issuer: this.spec.issuer, ...safeErrorFields(error) });
      throw new UnauthorizedError("The token's issuer could not be reached to read its keys.");
    });
    return this.endpoints;
  }

  private async readDiscovery(): Promise<IssuerEndpoints> {
    const url = `${this.spec.issuer.replace(/\/$/, '')}/.well-known/openid-configuration`;
    const response = await fetch(url, {
      signal: AbortSignal.timeout(this.spec.jwksTimeoutMs),
      redirect: 'error',
      headers: { accept: 'application/json' },
    });
    if (response.status !== 200) throw new Error(`discovery answered ${response.status}`);
    const document = (await response.json()) as Record<string, unknown>;
    if (document.issuer !== this.spec.issuer) throw new Error('the discovery document names another issuer');
    const jwksUri = this.spec.jwksUri ?? document.jwks_uri;
    if (typeof jwksUri !== 'string' || !/^https?:\/\//.test(jwksUri)) throw new Error('no jwks_uri in discovery');
    const text = (value: unknown) => (typeof value === 'string' ? value : undefined);
    return {
      jwksUri,
      authorizationEndpoint: text(document.authorization_endpoint),
      tokenEndpoint: text(document.token_endpoint),
    };
  }

  /**
   * The key for a token. Keys in hand never wait: jose's own cache age is unbounded here and the set is refreshed
   * in the background every jwksCacheMaxAgeSec, so an issuer that hangs delays nothing signed with a known key;
   * an unknown `kid` refetches at most once per cooldown (concurrent ones share the fetch), bounded by the timeout.
   */
  async keys(): Promise<JWTVerifyGetKey> {
    if (!this.jwks) {
      const jwksUri = this.spec.jwksUri ?? (await this.discover()).jwksUri;
      this.jwks ??= createRemoteJWKSet(new URL(jwksUri), {
        timeoutDuration: this.spec.jwksTimeoutMs,
        cooldownDuration: this.spec.jwksCooldownSec * 1000,
        cacheMaxAge: Infinity,
      });
      this.refreshedAt = Date.now();
    }
    const jwks = this.jwks;
    if (Date.now() - this.refreshedAt > this.spec.jwksCacheMaxAgeSec * 1000 && !jwks.reloading && jwks.jwks()) {
      this.refreshedAt = Date.now();
      jwks
        .reload()
        .catch((error: Error) =>
          this.logger.warn({ msg: 'JWKS refresh failed', issuer: this.spec.issuer, ...safeErrorFields(error) }),
        );
    }
    return jwks;
  }
}

/** Why jose refused a token, in words a caller can act on (never the token). */
function refusal(error: unknown): Error {
  if (error instanceof errors.JWTExpired) return new TokenExpiredError();
  if (error instanceof errors.JWTClaimValidationFailed) {
    return new UnauthorizedError(`The token's "${error.claim}" claim is not accepted (${error.reason}).`);
  }
  if (error instanceof errors.JOSEAlgNotAllowed) {
    return new UnauthorizedError("The token's algorithm is not accepted for its issuer.");
  }
  if (error instanceof errors.JWKSNoMatchingKey) {
    return new UnauthorizedError("No key of the token's issuer matches its kid.");
  }
  if (error instanceof errors.JWKSTimeout) {
    return new UnauthorizedError("The token's issuer did not answer for its keys in time.");
  }
  if (error instanceof UnauthorizedError) return error;
  return new UnauthorizedError('The token is not valid.');
}

/**
 * JWT bearer tokens of the issuers in AUTH_ISSUERS_FILE (docs/operations.md#tokens-from-your-identity-provider):
 * jose's jwtVerify with the issuer, audience and algorithms always set (asymmetric ones only), `exp` required; the
 * claims mapped to an owner and scopes. What was verified is kept until it expires (60 s at most), so a busy
 * caller pays one signature check a minute rather than one a request.
 */
@Injectable()
export class JwtVerifier {
  private readonly logger = new Logger('JwtVerifier');
  private readonly issuers = new Map<string, TrustedIssuer>();
  private readonly verified = new Map<string, Verified>();

  constructor(@Inject(ISSUERS) config: IssuersConfig) {
    for (const spec of config.issuers) this.issuers.set(spec.issuer, new TrustedIssuer(spec, this.logger));
  }

  get enabled(): boolean {
    return this.issuers.size > 0;
  }

  /** The issuer the console signs in with, and its endpoints (discovery), when one is configured. */
  async consoleIssuer(): Promise<{ spec: IssuerSpec; endpoints: IssuerEndpoints } | undefined> {
    const issuer = [...this.issuers.values()].find((i) => i.spec.console);
    if (!issuer) return undefined;
    return { spec: issuer.spec, endpoints: await issuer.discover() };
  }

  async verify(token: string): Promise<Principal> {
    const now = Date.now();
    const cached = this.verified.get(token);
    if (cached) {
      if (cached.principal.expiresAt! <= now) {
        this.verified.delete(token);
        throw new TokenExpiredError();
      }
      if (cached.until > now) return cached.principal;
      this.verified.delete(token);
    }
    if (!COMPACT_JWS.test(token)) throw new UnauthorizedError();
    let claimedIssuer: unknown;
    try {
      // Only to pick which issuer's keys to verify with: jwtVerify below checks `iss` against that issuer.
      claimedIssuer = decodeJwt(token).iss;
    } catch {
      throw new UnauthorizedError('The token is not a JWT.');
    }
    const issuer = typeof claimedIssuer === 'string' ? this.issuers.get(claimedIssuer) : undefined;
    if (!issuer) throw new UnauthorizedError("The token's issuer is not trusted here.");
    const { spec } = issuer;
    let payload: JWTPayload;
    try {
      ({ payload } = await jwtVerify(token, await issuer.keys(), {
        issuer: spec.issuer,
        audience: spec.audience,
        algorithms: spec.algorithms,
        clockTolerance: spec.clockToleranceSec,
        requiredClaims: ['exp'],
      }));
    } catch (error) {
      throw refusal(error);
    }
    let ownerId: string;
    try {
      ownerId = ownerOf(payload, spec.owner);
    } catch (error) {
      if (error instanceof UnmappedOwnerError) {
        throw new UnauthorizedError(`The token maps to no owner: ${error.message}.`);
      }
      throw error;
    }
    const principal: Principal = {
      ownerId,
      scopes: scopesOf(payload, spec.scopes),
      actor: {
        ownerId,
        keyId: null,
        subject: typeof payload.sub === 'string' ? payload.sub : null,
        issuer: spec.issuer,
      },
      expiresAt: (payload.exp! + spec.clockToleranceSec) * 1000,
      revokedWith: null,
    };
    if (this.verified.size >= VERIFIED_MAX) this.verified.clear();
    this.verified.set(token, { principal, until: Math.min(now + VERIFIED_TTL_MS, principal.expiresAt!) });
    return principal;
  }
}
