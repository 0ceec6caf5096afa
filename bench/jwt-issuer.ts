import { mkdtempSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { exportJWK, generateKeyPair, SignJWT } from 'jose';
import { stringify } from 'yaml';

/**
 * The create-jwt case's issuer: a JWKS server on 127.0.0.1 with one RS256 key made here, the AUTH_ISSUERS_FILE
 * that trusts it, and a token of it good for an hour (the case reuses one token, as a service reuses its token
 * until it expires).
 */
export async function benchIssuer(): Promise<{
  file: string;
  token: string;
  jwksRequests: () => number;
  stop(): Promise<void>;
}> {
  const { privateKey, publicKey } = await generateKeyPair('RS256');
  const jwk = { ...(await exportJWK(publicKey)), kid: 'bench-1', alg: 'RS256', use: 'sig' };
  let requests = 0;
  const server = createServer((_req, res) => {
    requests++;
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ keys: [jwk] }));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const file = join(mkdtempSync(join(tmpdir(), 'onejob-bench-issuers-')), 'issuers.yaml');
  writeFileSync(
    file,
    stringify({
      issuers: [
        {
          issuer: url,
          jwksUri: `${url}/jwks`,
          audience: 'onejob',
          algorithms: ['RS256'],
          owner: { claim: 'sub' },
          scopes: { static: ['jobs:write', 'jobs:read'] },
        },
      ],
    }),
  );
  const token = await new SignJWT({ sub: 'bench-jwt' })
    .setProtectedHeader({ alg: 'RS256', kid: 'bench-1', typ: 'JWT' })
    .setIssuer(url)
    .setAudience('onejob')
    .setIssuedAt()
    .setExpirationTime('1h')
    .sign(privateKey);
  return {
    file,
    token,
    jwksRequests: () => requests,
    stop: () => new Promise((resolve) => server.close(() => resolve())),
  };
}
