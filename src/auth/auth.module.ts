import { Module } from '@nestjs/common';
import { APP_GUARD } from '@nestjs/core';

import { type AppConfig, appConfig } from '../config/app.config.js';
import { loadIssuers } from '../config/issuers.loader.js';
import { ApiKeysRepository } from './api-keys.repository.js';
import { ApiKeysService } from './api-keys.service.js';
import { AuthGuard } from './auth.guard.js';
import { CredentialWatch } from './credential-watch.js';
import { ISSUERS, JwtVerifier } from './jwt-verifier.js';
import { SCOPES } from './scopes.js';
import { StreamTokensService } from './stream-tokens.service.js';

@Module({
  providers: [
    ApiKeysRepository,
    ApiKeysService,
    {
      provide: ISSUERS,
      inject: [appConfig.KEY],
      useFactory: (config: AppConfig) => loadIssuers(config.authIssuersFile, SCOPES),
    },
    JwtVerifier,
    StreamTokensService,
    CredentialWatch,
    { provide: APP_GUARD, useClass: AuthGuard },
  ],
  exports: [ApiKeysService, JwtVerifier, StreamTokensService, CredentialWatch],
})
export class AuthModule {}
