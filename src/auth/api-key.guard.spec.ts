import { jest } from '@jest/globals';
import type { ExecutionContext } from '@nestjs/common';
import { Reflector } from '@nestjs/core';

import { ApiKeyGuard, ForbiddenError, UnauthorizedError } from './api-key.guard.js';
import type { ApiKeysService } from './api-keys.service.js';
import { ANY_SCOPE_KEY, PUBLIC_KEY, SCOPES_KEY } from './auth.decorators.js';
import type { Principal } from './scopes.js';

const principal: Principal = { keyId: 'k1', ownerId: 'owner-1', scopes: ['jobs:read'] };

function run(headers: Record<string, string>, metadata: Record<string, unknown>, found: Principal | null = principal) {
  const request: { headers: Record<string, string>; principal?: Principal } = { headers };
  const reflector = { getAllAndOverride: (key: string) => metadata[key] } as unknown as Reflector;
  const authenticate = jest.fn<ApiKeysService['authenticate']>().mockResolvedValue(found ?? undefined);
  const guard = new ApiKeyGuard(reflector, { authenticate } as unknown as ApiKeysService);
  const context = {
    getHandler: () => undefined,
    getClass: () => undefined,
    switchToHttp: () => ({ getRequest: () => request }),
  } as unknown as ExecutionContext;
  return { result: guard.canActivate(context), request, authenticate };
}

describe('ApiKeyGuard', () => {
  it('resolves the owner from the key and lets a request with the scope through', async () => {
    const { result, request, authenticate } = run({ authorization: 'Bearer oj_abc' }, { [SCOPES_KEY]: ['jobs:read'] });
    await expect(result).resolves.toBe(true);
    expect(authenticate).toHaveBeenCalledWith('oj_abc');
    expect(request.principal).toEqual(principal);
  });

  it('answers 401 without a header, with another scheme, or with an unknown key', async () => {
    await expect(run({}, {}).result).rejects.toBeInstanceOf(UnauthorizedError);
    await expect(run({ authorization: 'Basic dXNlcjpwYXNz' }, {}).result).rejects.toBeInstanceOf(UnauthorizedError);
    await expect(run({ authorization: 'Bearer ' }, {}).result).rejects.toBeInstanceOf(UnauthorizedError);
    await expect(run({ authorization: 'Bearer oj_unknown' }, {}, null).result).rejects.toBeInstanceOf(
      UnauthorizedError,
    );
  });

  it('answers 403 when the key lacks a needed scope', async () => {
    await expect(
      run({ authorization: 'Bearer oj_abc' }, { [SCOPES_KEY]: ['jobs:write'] }).result,
    ).rejects.toBeInstanceOf(ForbiddenError);
  });

  it('lets a key with one of the alternative scopes through, and answers 403 when it holds none', async () => {
    await expect(
      run({ authorization: 'Bearer oj_abc' }, { [ANY_SCOPE_KEY]: ['jobs:read', 'ops:read'] }).result,
    ).resolves.toBe(true);
    await expect(
      run({ authorization: 'Bearer oj_abc' }, { [ANY_SCOPE_KEY]: ['ops:read', 'attempts:resolve'] }).result,
    ).rejects.toBeInstanceOf(ForbiddenError);
  });

  it('skips public routes without reading any key', async () => {
    const { result, authenticate } = run({}, { [PUBLIC_KEY]: true });
    await expect(result).resolves.toBe(true);
    expect(authenticate).not.toHaveBeenCalled();
  });
});
