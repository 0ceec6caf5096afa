import { Injectable } from '@nestjs/common';

import { ApiKeysService } from './api-keys.service.js';
import type { Principal } from './scopes.js';

/** setTimeout's longest delay (about 24.8 days); a later expiry re-arms the timer. */
const MAX_DELAY_MS = 2_147_483_647;

/** Calls `end` once when a credential stops working; returns what stops watching. */
export type CredentialEnd = (end: () => void) => () => void;

/**
 * When a principal's credential stops working, whatever it is: at its expiry (a JWT's `exp`, a key's or a stream
 * token's expiry) and at the revocation of the key behind it. An open stream ends then (I15): its client's
 * reconnect meets the same refusal as any request (`token_expired`, `key_revoked`).
 */
@Injectable()
export class CredentialWatch {
  constructor(private readonly apiKeys: ApiKeysService) {}

  until(principal: Principal): CredentialEnd {
    return (end) => {
      let ended = false;
      let timer: NodeJS.Timeout | undefined;
      const finish = () => {
        if (ended) return;
        ended = true;
        stop();
        end();
      };
      const arm = () => {
        if (principal.expiresAt === null) return;
        const left = principal.expiresAt - Date.now();
        if (left <= 0) return finish();
        timer = setTimeout(
          () => (principal.expiresAt! - Date.now() <= 0 ? finish() : arm()),
          Math.min(left, MAX_DELAY_MS),
        );
      };
      const unwatch = principal.revokedWith ? this.apiKeys.watch(principal.revokedWith, finish) : () => undefined;
      const stop = () => {
        clearTimeout(timer);
        unwatch();
      };
      arm();
      return () => {
        ended = true;
        stop();
      };
    };
  }
}
