import { Global, Module } from '@nestjs/common';

import { PgNotifications } from './pg-notifications.js';

/** The process's one LISTEN session, for every feature that listens (job wake-ups, API key revocations). */
@Global()
@Module({ providers: [PgNotifications], exports: [PgNotifications] })
export class NotificationsModule {}
