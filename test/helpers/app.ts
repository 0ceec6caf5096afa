import type { NestFastifyApplication } from '@nestjs/platform-fastify';
import request from 'supertest';
import type TestAgent from 'supertest/lib/agent.js';
import { DataSource } from 'typeorm';
import { createApp } from '../../src/app.setup.js';
import { ApiKeysService } from '../../src/auth/api-keys.service.js';
import { SCOPES, type Scope } from '../../src/auth/scopes.js';
import type { Env } from '../../src/config/env.js';
import { createTestDatabase, type TestDatabase } from './database.js';

export interface TestApp {
  app: NestFastifyApplication;
  baseUrl: string;
  http: () => TestAgent;
  dataSource: DataSource;
  database: TestDatabase;
  /** Creates an API key and returns it in clear. */
  key(ownerId: string, scopes?: Scope[]): Promise<string>;
  truncate(): Promise<void>;
  close(): Promise<void>;
}

export const TEST_CATALOG = 'test/fixtures/catalog.test.yaml';

/** The real app (createApp: same module, pipe, guard, filter as main.ts) on its own database and a real port. */
export async function startTestApp(overrides: Partial<Env> = {}, database?: TestDatabase): Promise<TestApp> {
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
  await app.listen({ port: 0, host: '127.0.0.1' });
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
    truncate: async () => {
      await dataSource.query('TRUNCATE jobs, attempts, job_events, certifications, api_keys, webhook_endpoints, owner_budgets CASCADE');
    },
    close: async () => {
      await app.close();
      if (!database) await db.drop();
    },
  };
}

export const bearer = (key: string) => ({ Authorization: `Bearer ${key}` });
