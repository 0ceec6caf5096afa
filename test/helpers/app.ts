import type { NestFastifyApplication } from '@nestjs/platform-fastify';
import request from 'supertest';
import type TestAgent from 'supertest/lib/agent.js';
import { DataSource } from 'typeorm';

import { createApp } from '../../src/app.setup.js';
import { ApiKeysService } from '../../src/auth/api-keys.service.js';
import { type Scope, SCOPES } from '../../src/auth/scopes.js';
import type { Env } from '../../src/config/env.js';
import { UsageService } from '../../src/usage/usage.service.js';
import { createTestDatabase, type TestDatabase, truncateAll } from './database.js';
import { describeViolations, OpenApiContract } from './openapi-contract.js';

export interface TestApp {
  app: NestFastifyApplication;
  baseUrl: string;
  http: () => TestAgent;
  dataSource: DataSource;
  database: TestDatabase;
  /** Creates an API key and returns it in clear. */
  key(ownerId: string, scopes?: Scope[]): Promise<string>;
  /** Empties every table of the schema (test/helpers/database.ts truncateAll) and restores the catalog's prices. */
  truncate(): Promise<void>;
  close(): Promise<void>;
}

export const TEST_CATALOG = 'test/fixtures/catalog.test.yaml';

let committedContract: OpenApiContract | undefined;
const violations: string[] = [];

/** Departures from openapi.json recorded since the last call (and forgotten: a test that expects them takes them). */
export function takeContractViolations(): string[] {
  return violations.splice(0);
}

// Every response any test of a file receives from an app of startTestApp is checked against openapi.json (see
// test/helpers/openapi-contract.ts); the test during which a departure happened fails with it.
afterEach(() => {
  const found = takeContractViolations();
  if (found.length) throw new Error(found.join('\n'));
});

/** The real app (createApp: same module, pipe, guard, filter as main.ts) on its own database and a real port. */
export async function startTestApp(
  overrides: Partial<Env> = {},
  database?: TestDatabase,
  contract: OpenApiContract = (committedContract ??= new OpenApiContract()),
): Promise<TestApp> {
  const db = database ?? (await createTestDatabase());
  const app = await createApp({
    databaseUrl: db.url,
    catalogFile: TEST_CATALOG,
    role: 'api',
    logLevel: 'silent',
    dbPoolSize: 10,
    migrationsRun: true,
    ...overrides,
  });
  app
    .getHttpAdapter()
    .getInstance()
    .addHook('onSend', async (request, reply, payload) => {
      const observed = {
        method: request.method,
        route: request.routeOptions?.url,
        url: request.url,
        status: reply.statusCode,
        headers: reply.getHeaders(),
        body: typeof payload === 'string' ? payload : Buffer.isBuffer(payload) ? payload.toString('utf8') : undefined,
      };
      let found: string[];
      try {
        found = contract.check(observed);
      } catch (error) {
        found = [`the check itself failed: ${(error as Error).message}`];
      }
      if (found.length) violations.push(describeViolations(observed, found));
      return payload;
    });
  try {
    await app.listen({ port: 0, host: '127.0.0.1' });
  } catch (error) {
    // A refused start (REQUIRE_SYNCHRONOUS_REPLICATION, a failed migration) has bootstrapped part of the app: its
    // LISTEN session would go on reconnecting into later suites of this jest worker. main.ts exits instead.
    await app.close().catch(() => undefined);
    if (!database) await db.drop();
    throw error;
  }
  const address = app.getHttpServer().address();
  const baseUrl = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`;
  const dataSource = app.get(DataSource);
  return {
    app,
    baseUrl,
    http: () => request(baseUrl),
    dataSource,
    database: db,
    key: async (ownerId, scopes = [...SCOPES]) => (await app.get(ApiKeysService).create(ownerId, scopes)).key,
    // Every table, then what the app writes at start (the catalog's prices): the database as a fresh start leaves it.
    truncate: async () => {
      await truncateAll(dataSource);
      await app.get(UsageService).onApplicationBootstrap();
    },
    close: async () => {
      await app.close();
      if (!database) await db.drop();
    },
  };
}

export const bearer = (key: string) => ({ Authorization: `Bearer ${key}` });
