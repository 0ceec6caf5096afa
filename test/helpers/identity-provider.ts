import { createHash, randomBytes, randomUUID } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { type CryptoKey, exportJWK, generateKeyPair, type JWK, type JWTPayload, SignJWT } from 'jose';
import { stringify } from 'yaml';

/** Writes an AUTH_ISSUERS_FILE to a temp folder and returns its path. */
export function writeIssuers(issuers: unknown[]): string {
  const file = join(mkdtempSync(join(tmpdir(), 'onejob-issuers-')), 'issuers.yaml');
  writeFileSync(file, stringify({ issuers }));
  return file;
}

type Alg = 'RS256' | 'ES256' | 'EdDSA';

interface SigningKey {
  kid: string;
  alg: Alg;
  privateKey: CryptoKey;
  publicJwk: JWK;
}

/**
 * A minimal OpenID provider for tests, keys made with jose: discovery, a JWKS endpoint (counted, and able to hang),
 * and the authorization-code flow with PKCE (S256) that the console signs in with. Every key it signs with is its
 * own; `serve` says which of them the JWKS endpoint lists.
 */
export class TestIdentityProvider {
  url = '';
  jwksRequests = 0;
  discoveryRequests = 0;
  /** While true, JWKS requests are accepted and never answered. */
  hang = false;
  /** The claims of the access token the token endpoint issues for a code. */
  claimsForLogin: () => JWTPayload = () => ({ sub: 'console-user' });
  readonly keys = new Map<string, SigningKey>();
  readonly served = new Set<string>();
  private server?: Server;
  private readonly codes = new Map<string, { challenge: string; redirectUri: string; clientId: string }>();
  private readonly hung = new Set<ServerResponse>();

  get issuer(): string {
    return this.url;
  }

  async start(): Promise<this> {
    this.server = createServer((req, res) => void this.handle(req, res));
    await new Promise<void>((resolve) => this.server!.listen(0, '127.0.0.1', resolve));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this;
  }

  async stop(): Promise<void> {
    for (const res of this.hung) res.destroy();
    this.server?.closeAllConnections();
    await new Promise<void>((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
  }

  /** A new signing key; listed by the JWKS endpoint unless `serve` is false. */
  async addKey(alg: Alg = 'RS256', serve = true): Promise<string> {
    const { privateKey, publicKey } = await generateKeyPair(alg, { extractable: true });
    const kid = randomUUID();
    const publicJwk = { ...(await exportJWK(publicKey)), kid, alg, use: 'sig' };
    this.keys.set(kid, { kid, alg, privateKey, publicJwk });
    if (serve) this.served.add(kid);
    return kid;
  }

  /** A token signed with `kid` (the first key by default): iss is this provider, exp an hour away unless given. */
  async sign(claims: JWTPayload, options: { kid?: string; audience?: string; expiresIn?: number | string } = {}) {
    const key = this.keys.get(options.kid ?? [...this.keys.keys()][0])!;
    const jwt = new SignJWT(claims)
      .setProtectedHeader({ alg: key.alg, kid: key.kid, typ: 'JWT' })
      .setIssuer(claims.iss ?? this.issuer)
      .setIssuedAt();
    if (options.audience) jwt.setAudience(options.audience);
    if (claims.exp === undefined) jwt.setExpirationTime(options.expiresIn ?? '1h');
    return jwt.sign(key.privateKey);
  }

  publicJwk(kid: string): JWK {
    return this.keys.get(kid)!.publicJwk;
  }

  private json(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
    res.writeHead(status, { 'content-type': 'application/json', ...headers });
    res.end(JSON.stringify(body));
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', this.url);
    if (url.pathname === '/.well-known/openid-configuration') {
      this.discoveryRequests++;
      return this.json(res, 200, {
        issuer: this.issuer,
        jwks_uri: `${this.url}/jwks`,
        authorization_endpoint: `${this.url}/authorize`,
        token_endpoint: `${this.url}/token`,
        response_types_supported: ['code'],
        code_challenge_methods_supported: ['S256'],
        id_token_signing_alg_values_supported: ['RS256'],
      });
    }
    if (url.pathname === '/jwks') {
      this.jwksRequests++;
      if (this.hang) {
        this.hung.add(res);
        res.on('close', () => this.hung.delete(res));
        return;
      }
      return this.json(res, 200, { keys: [...this.served].map((kid) => this.keys.get(kid)!.publicJwk) });
    }
    if (url.pathname === '/authorize') {
      // Signs anyone in at once: the test is about the console's side of the flow.
      const p = url.searchParams;
      if (p.get('response_type') !== 'code' || p.get('code_challenge_method') !== 'S256' || !p.get('code_challenge')) {
        return this.json(res, 400, { error: 'invalid_request' });
      }
      const code = randomBytes(16).toString('hex');
      this.codes.set(code, {
        challenge: p.get('code_challenge')!,
        redirectUri: p.get('redirect_uri')!,
        clientId: p.get('client_id')!,
      });
      const back = new URL(p.get('redirect_uri')!);
      back.searchParams.set('code', code);
      back.searchParams.set('state', p.get('state') ?? '');
      res.writeHead(302, { location: back.href });
      return void res.end();
    }
    if (url.pathname === '/token' && req.method === 'POST') {
      const cors = { 'access-control-allow-origin': '*' };
      let body = '';
      for await (const chunk of req) body += chunk;
      const form = new URLSearchParams(body);
      const grant = this.codes.get(form.get('code') ?? '');
      this.codes.delete(form.get('code') ?? '');
      const verifier = form.get('code_verifier') ?? '';
      const challenge = createHash('sha256').update(verifier).digest('base64url');
      if (
        !grant ||
        form.get('grant_type') !== 'authorization_code' ||
        grant.challenge !== challenge ||
        grant.redirectUri !== form.get('redirect_uri') ||
        grant.clientId !== form.get('client_id')
      ) {
        return this.json(res, 400, { error: 'invalid_grant' }, cors);
      }
      const accessToken = await this.sign({ ...this.claimsForLogin() }, { audience: 'onejob', expiresIn: '10m' });
      return this.json(res, 200, { access_token: accessToken, token_type: 'Bearer', expires_in: 600 }, cors);
    }
    this.json(res, 404, { error: 'not_found' });
  }
}
