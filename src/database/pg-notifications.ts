import { Inject, Injectable, Logger, type OnApplicationBootstrap, type OnApplicationShutdown } from '@nestjs/common';
import pg from 'pg';

import { type AppConfig, appConfig } from '../config/app.config.js';
import { sessionClient } from './data-source.options.js';
import { sessionDatabaseUrl } from './session-url.js';

const RECONNECT_MS = 2000;
/**
 * How often the session asks its server whether it is still the primary. NOTIFY is sent by whoever writes, and a
 * session left on a demoted or standby server hears nothing (docs/operations.md#failover): it moves.
 */
export const LISTEN_CHECK_MS = 5000;
const CHECK_SQL =
  "SELECT pg_is_in_recovery() AS recovery, current_setting('default_transaction_read_only') = 'on' AS read_only";

type Handler = (payload: string) => void;

/**
 * The process's one LISTEN session (docs/design.md#flow, "Wake-ups"). LISTEN needs a session connection, which a
 * transaction pooler does not give: it uses DATABASE_DIRECT_URL when set. Consumers subscribe to channels and learn
 * when the session is up or lost: while it is down, a notification may be missed, so whoever relies on one (a
 * cache, a waiter) must fall back to reading the database.
 */
@Injectable()
export class PgNotifications implements OnApplicationBootstrap, OnApplicationShutdown {
  private readonly logger = new Logger(PgNotifications.name);
  private readonly handlers = new Map<string, Set<Handler>>();
  private readonly stateListeners = new Set<(listening: boolean) => void>();
  private client?: pg.Client;
  private reconnectTimer?: NodeJS.Timeout;
  private checkTimer?: NodeJS.Timeout;
  private stopped = false;
  private warned = false;
  /** True while the LISTEN session is up. */
  listening = false;

  constructor(@Inject(appConfig.KEY) private readonly config: AppConfig) {}

  onApplicationBootstrap(): void {
    void this.listen();
  }

  async onApplicationShutdown(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.reconnectTimer);
    clearInterval(this.checkTimer);
    const client = this.client;
    this.client = undefined;
    this.setListening(false);
    await client?.end().catch(() => undefined);
  }

  /** Channels are fixed at start-up (subscribe from a constructor): the session LISTENs to each on connect. */
  subscribe(channel: string, handler: Handler): void {
    if (!/^[a-z_]+$/.test(channel)) throw new Error(`bad channel name ${channel}`);
    const set = this.handlers.get(channel) ?? new Set<Handler>();
    set.add(handler);
    this.handlers.set(channel, set);
  }

  /** Called with true when the session comes up and false when it is lost (a notification may have been missed). */
  onStateChange(listener: (listening: boolean) => void): void {
    this.stateListeners.add(listener);
  }

  private setListening(listening: boolean): void {
    if (this.listening === listening) return;
    this.listening = listening;
    for (const listener of this.stateListeners) listener(listening);
  }

  private async listen(): Promise<void> {
    const url = sessionDatabaseUrl(this.config);
    if (this.stopped || !url || !this.handlers.size) return;
    const client = sessionClient(url, `onejob-${this.config.role}-listen`);
    client.on('notification', (message) => {
      for (const handler of this.handlers.get(message.channel) ?? []) handler(message.payload ?? '');
    });
    const lost = (error?: Error) => {
      if (this.client !== client) return;
      this.client = undefined;
      clearInterval(this.checkTimer);
      client.end().catch(() => undefined);
      this.setListening(false);
      if (this.stopped) return;
      this.logger.warn({ msg: 'LISTEN connection lost: polling until it is back', error: error?.message });
      this.warned = true;
      this.reconnectTimer = setTimeout(() => void this.listen(), RECONNECT_MS);
    };
    client.on('error', lost);
    client.on('end', () => lost());
    try {
      await client.connect();
      await this.mustBePrimary(client);
      await client.query([...this.handlers.keys()].map((channel) => `LISTEN ${channel}`).join('; '));
      if (this.stopped) {
        await client.end();
        return;
      }
      this.client = client;
      if (this.warned) this.logger.log({ msg: 'LISTEN connection back: wake-ups by NOTIFY' });
      this.warned = false;
      this.setListening(true);
      this.checkTimer = setInterval(() => {
        this.mustBePrimary(client).catch((error: Error) => lost(error));
      }, LISTEN_CHECK_MS);
      this.checkTimer.unref();
    } catch (error) {
      client.removeAllListeners('end');
      client.end().catch(() => undefined);
      if (!this.warned) {
        this.logger.warn({
          msg: 'LISTEN failed: falling back to polling (set DATABASE_DIRECT_URL behind a transaction pooler)',
          error: (error as Error).message,
        });
        this.warned = true;
      }
      if (!this.stopped) this.reconnectTimer = setTimeout(() => void this.listen(), RECONNECT_MS);
    }
  }

  /** A session on a standby, or on a primary demoted in place, never hears a NOTIFY: it is dropped and made anew. */
  private async mustBePrimary(client: pg.Client): Promise<void> {
    const { rows } = await client.query<{ recovery: boolean; read_only: boolean }>(CHECK_SQL);
    if (rows[0].recovery || rows[0].read_only) {
      throw new Error('the server is a standby or read-only now: NOTIFY is sent on the primary');
    }
  }
}
