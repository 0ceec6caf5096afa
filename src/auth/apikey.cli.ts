import 'reflect-metadata';

import { parseArgs } from 'node:util';

import { pino } from 'pino';
import { DataSource } from 'typeorm';

import { loadEnv } from '../config/app.config.js';
import { dataSourceOptions } from '../database/data-source.options.js';
import { resolveDatabase } from '../database/database-url.js';
import { migrateOver } from '../database/migrate.js';
import { sessionDatabaseUrl } from '../database/session-url.js';
import { type ApiKeyRecord, ApiKeysRepository } from './api-keys.repository.js';
import { ApiKeysService } from './api-keys.service.js';
import { expiryOf, UsageError } from './key-expiry.js';
import { isScope, SCOPES } from './scopes.js';

const usage = `usage:
  npm run apikey -- create --owner OWNER --scopes ${SCOPES.join(',')} [--expires-in 30d | --expires-at ISO-8601]
      prints the new key alone on the last line of stdout, once: only its SHA-256 hash is stored
  npm run apikey -- list
      id, owner, scopes, created, expires, last used, revoked (never the key)
  npm run apikey -- revoke KEY_ID
      the key is refused (401) from the next request on, by every replica
  npm run apikey -- bootstrap [--owner admin] [--scopes ${SCOPES.join(',')}]
      the first key, only while there is none (a container's first start): ONEJOB_BOOTSTRAP_KEY when set (nothing
      printed), else a new key printed once on stdout; when keys exist already it changes nothing and exits 0`;

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

const iso = (date: Date | null) => (date ? date.toISOString() : '-');

function table(keys: ApiKeyRecord[]): string {
  const rows = [['id', 'owner', 'scopes', 'created', 'expires', 'last used', 'revoked']];
  for (const k of keys) {
    rows.push([
      k.id,
      k.ownerId,
      k.scopes.join(','),
      iso(k.createdAt),
      iso(k.expiresAt),
      iso(k.lastUsedAt),
      iso(k.revokedAt),
    ]);
  }
  const widths = rows[0].map((_, i) => Math.max(...rows.map((r) => r[i].length)));
  return rows
    .map((r) =>
      r
        .map((cell, i) => cell.padEnd(widths[i]))
        .join('  ')
        .trimEnd(),
    )
    .join('\n');
}

type Command =
  | { name: 'create'; owner: string; scopes: string[]; expiresAt: Date | null }
  | { name: 'bootstrap'; owner: string; scopes: string[] }
  | { name: 'list' }
  | { name: 'revoke'; id: string };

function ownerOf(raw: string): string {
  const owner = raw.trim();
  if (owner.length < 1 || owner.length > 200) throw new UsageError('--owner must be 1 to 200 characters');
  return owner;
}

function scopesOf(raw: string): string[] {
  const scopes = raw
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  if (!scopes.length || scopes.some((s) => !isScope(s))) {
    throw new UsageError(`--scopes must be a comma-separated list of ${SCOPES.join(', ')}`);
  }
  return scopes;
}

function parseCommand(): Command {
  const { positionals, values } = parseArgs({
    allowPositionals: true,
    options: {
      owner: { type: 'string' },
      scopes: { type: 'string' },
      'expires-in': { type: 'string' },
      'expires-at': { type: 'string' },
    },
  });
  switch (positionals[0]) {
    case 'list':
      return { name: 'list' };
    case 'revoke': {
      const id = positionals[1] ?? '';
      if (!UUID.test(id)) throw new UsageError('revoke needs the key id (a UUID, as `list` shows it)');
      return { name: 'revoke', id: id.toLowerCase() };
    }
    case 'create': {
      if (!values.owner || !values.scopes) throw new UsageError('create needs --owner and --scopes');
      return {
        name: 'create',
        owner: ownerOf(values.owner),
        scopes: scopesOf(values.scopes),
        expiresAt: expiryOf(values['expires-in'], values['expires-at']),
      };
    }
    case 'bootstrap':
      return {
        name: 'bootstrap',
        owner: ownerOf(values.owner ?? 'admin'),
        scopes: scopesOf(values.scopes ?? SCOPES.join(',')),
      };
    default:
      throw new UsageError('');
  }
}

async function run(command: Command, keys: ApiKeysService, bootstrapKey: string | undefined): Promise<number> {
  switch (command.name) {
    case 'bootstrap': {
      const first = await keys.createFirst(command.owner, command.scopes.filter(isScope), bootstrapKey);
      if (!first) {
        process.stderr.write('API keys exist already: bootstrap changed nothing\n');
        return 0;
      }
      process.stderr.write(
        `created the first API key ${first.id} for owner ${command.owner} with scopes ${command.scopes.join(',')}\n`,
      );
      // An operator's own key (ONEJOB_BOOTSTRAP_KEY) is theirs already: never echoed.
      if (!bootstrapKey) process.stdout.write(`${first.key}\n`);
      return 0;
    }
    case 'create': {
      const { id, key } = await keys.create(command.owner, command.scopes.filter(isScope), command.expiresAt);
      const expiry = command.expiresAt ? `, expiring ${command.expiresAt.toISOString()}` : '';
      process.stderr.write(
        `created API key ${id} for owner ${command.owner} with scopes ${command.scopes.join(',')}${expiry}\n`,
      );
      process.stdout.write(`${key}\n`);
      return 0;
    }
    case 'list':
      process.stdout.write(`${table(await keys.list())}\n`);
      return 0;
    case 'revoke': {
      const revoked = await keys.revoke(command.id);
      if (!revoked) {
        process.stderr.write(`no API key has the id ${command.id}\n`);
        return 1;
      }
      // One JSON line on stderr, the shape of the service's own logs, for whoever collects them.
      const log = pino({ base: { context: 'apikey' } }, pino.destination(2));
      log.warn({ keyId: revoked.id, ownerId: revoked.ownerId, revokedAt: revoked.revokedAt }, 'API key revoked');
      return 0;
    }
  }
}

async function main(): Promise<number> {
  let command: Command;
  try {
    command = parseCommand();
  } catch (error) {
    const message = (error as Error).message;
    process.stderr.write(`${message ? `${message}\n` : ''}${usage}\n`);
    return 2;
  }
  const env = loadEnv();
  const database = await resolveDatabase(env);
  try {
    // The migration lock needs one session: DATABASE_DIRECT_URL behind a pooler, never the pooler itself.
    if (env.migrationsRun) {
      await migrateOver(sessionDatabaseUrl({ ...env, databaseUrl: database.url })!, 'onejob-apikey-migrate');
    }
    const dataSource = await new DataSource(
      dataSourceOptions({ url: database.url, poolSize: 2, applicationName: 'onejob-apikey' }),
    ).initialize();
    try {
      return await run(command, new ApiKeysService(new ApiKeysRepository(dataSource)), env.bootstrapApiKey);
    } finally {
      await dataSource.destroy();
    }
  } finally {
    await database.stop();
  }
}

main().then(
  (code) => process.exit(code),
  (error: Error) => {
    process.stderr.write(`apikey failed: ${error.message}\n`);
    process.exit(1);
  },
);
