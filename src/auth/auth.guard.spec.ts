import { jest } from '@jest/globals';
import type { ExecutionContext } from '@nestjs/common';
import type { Reflector } from '@nestjs/core';

import { ValidationFailedError } from '../common/domain.errors.js';
import type { ApiKeysService } from './api-keys.service.js';
import { ANY_SCOPE_KEY, PUBLIC_KEY, SCOPES_KEY, STREAM_TOKEN_KEY } from './auth.decorators.js';
import { ForbiddenError, UnauthorizedError } from './auth.errors.js';
import { AuthGuard } from './auth.guard.js';
import type { JwtVerifier } from './jwt-verifier.js';
import type { Principal } from './scopes.js';
import type { StreamTokensService } from './stream-tokens.service.js';

const JOB = '0193e0b2-7c51-7d7a-9a4e-5d3b1f0c2a11';
const principal = (extra: Partial<Principal> = {}): Principal => ({
  ownerId: 'owner-1',
  scopes: ['jobs:read'],
  actor: { ownerId: 'owner-1', keyId: 'k1', subject: null, issuer: null },
  expiresAt: null,
  revokedWith: 'k1',
  ...extra,
});

function run(
  request: { headers: Record<string, string>; query?: Record<string, unknown>; params?: Record<string, string> },
  metadata: Record<string, unknown>,
  jwtEnabled = true,
) {
  const reflector = { getAllAndOverride: (key: string) => metadata[key] } as unknown as Reflector;
  const apiKeys = { authenticate: jest.fn<ApiKeysService['authenticate']>().mockResolvedValue(principal()) };
  const jwts = {
    enabled: jwtEnabled,
    verify: jest.fn<JwtVerifier['verify']>().mockResolvedValue(principal({ ownerId: 'team-jwt' })),
  };
  const streamTokens = {
    authenticate: jest
      .fn<StreamTokensService['authenticate']>()
      .mockResolvedValue(principal({ stream: { kind: 'job', id: JOB } })),
  };
  const guard = new AuthGuard(
    reflector,
    apiKeys as unknown as ApiKeysService,
    jwts as unknown as JwtVerifier,
    streamTokens as unknown as StreamTokensService,
  );
  const context = {
    getHandler: () => undefined,
    getClass: () => undefined,
    switchToHttp: () => ({ getRequest: () => request }),
  } as unknown as ExecutionContext;
  return {
    result: guard.canActivate(context),
    request: request as typeof request & { principal?: Principal },
    apiKeys,
    jwts,
    streamTokens,
  };
}

const stream = { headers: { accept: 'text/event-stream' }, params: { id: JOB }, query: { access_token: 'ojs_x' } };

describe('AuthGuard', () => {
  it('sends oj_ tokens to the API keys and anything else to the JWT verifier', async () => {
    const key = run({ headers: { authorization: 'Bearer oj_abc' } }, { [SCOPES_KEY]: ['jobs:read'] });
    await expect(key.result).resolves.toBe(true);
    expect(key.apiKeys.authenticate).toHaveBeenCalledWith('oj_abc');
    expect(key.jwts.verify).not.toHaveBeenCalled();
    const jwt = run({ headers: { authorization: 'bearer eyJ.eyJ.sig' } }, {});
    await expect(jwt.result).resolves.toBe(true);
    expect(jwt.jwts.verify).toHaveBeenCalledWith('eyJ.eyJ.sig');
    expect(jwt.request.principal?.ownerId).toBe('team-jwt');
  });

  it('answers 401 without a header, with another scheme, or with a JWT and no issuer configured', async () => {
    await expect(run({ headers: {} }, {}).result).rejects.toBeInstanceOf(UnauthorizedError);
    await expect(run({ headers: { authorization: 'Basic dXNlcjpwYXNz' } }, {}).result).rejects.toBeInstanceOf(
      UnauthorizedError,
    );
    await expect(run({ headers: { authorization: 'Bearer eyJ.eyJ.sig' } }, {}, false).result).rejects.toBeInstanceOf(
      UnauthorizedError,
    );
  });

  it('answers 403 when the principal lacks a needed scope, or every alternative', async () => {
    await expect(
      run({ headers: { authorization: 'Bearer oj_abc' } }, { [SCOPES_KEY]: ['jobs:write'] }).result,
    ).rejects.toBeInstanceOf(ForbiddenError);
    await expect(
      run({ headers: { authorization: 'Bearer oj_abc' } }, { [ANY_SCOPE_KEY]: ['ops:read', 'attempts:resolve'] })
        .result,
    ).rejects.toBeInstanceOf(ForbiddenError);
  });

  it('takes a stream token only on a stream route, for its own stream, as a stream', async () => {
    const own = run(stream, { [STREAM_TOKEN_KEY]: 'job' });
    await expect(own.result).resolves.toBe(true);
    expect(own.streamTokens.authenticate).toHaveBeenCalledWith('ojs_x');
    const other = { ...stream, params: { id: '0193e0b2-7c51-7d7a-9a4e-5d3b1f0c2a12' } };
    await expect(run(other, { [STREAM_TOKEN_KEY]: 'job' }).result).rejects.toBeInstanceOf(UnauthorizedError);
    await expect(run(stream, { [STREAM_TOKEN_KEY]: 'batch' }).result).rejects.toBeInstanceOf(UnauthorizedError);
    const json = { ...stream, headers: { accept: 'application/json' } };
    await expect(run(json, { [STREAM_TOKEN_KEY]: 'job' }).result).rejects.toBeInstanceOf(UnauthorizedError);
    // Elsewhere the query parameter is not read at all: the Authorization header is what counts.
    const elsewhere = run(stream, {});
    await expect(elsewhere.result).rejects.toBeInstanceOf(UnauthorizedError);
    expect(elsewhere.streamTokens.authenticate).not.toHaveBeenCalled();
  });

  it('refuses a stream token beside an Authorization header, or given twice', async () => {
    const both = { ...stream, headers: { ...stream.headers, authorization: 'Bearer oj_abc' } };
    await expect(run(both, { [STREAM_TOKEN_KEY]: 'job' }).result).rejects.toBeInstanceOf(ValidationFailedError);
    const twice = { ...stream, query: { access_token: ['ojs_x', 'ojs_y'] } };
    await expect(run(twice, { [STREAM_TOKEN_KEY]: 'job' }).result).rejects.toBeInstanceOf(ValidationFailedError);
  });

  it('skips public routes without reading any credential', async () => {
    const { result, apiKeys } = run({ headers: {} }, { [PUBLIC_KEY]: true });
    await expect(result).resolves.toBe(true);
    expect(apiKeys.authenticate).not.toHaveBeenCalled();
  });
});
