import 'reflect-metadata';
import { parseArgs } from 'node:util';
import { DataSource } from 'typeorm';
import { loadEnv } from '../config/app.config.js';
import { dataSourceOptions } from '../database/data-source.options.js';
import { resolveDatabase } from '../database/database-url.js';
import { runMigrationsLocked } from '../database/migrate.js';
import { ApiKeysRepository } from './api-keys.repository.js';
import { ApiKeysService } from './api-keys.service.js';
import { isScope, SCOPES } from './scopes.js';

const usage = `usage: npm run apikey -- create --owner OWNER --scopes ${SCOPES.join(',')}
Prints the new key alone on the last line of stdout, once: only its SHA-256 hash is stored.`;

async function main(): Promise<number> {
  const { positionals, values } = parseArgs({
    allowPositionals: true,
    options: { owner: { type: 'string' }, scopes: { type: 'string' } },
  });
  if (positionals[0] !== 'create' || !values.owner || !values.scopes) {
    process.stderr.write(`${usage}\n`);
    return 2;
  }
  const owner = values.owner.trim();
  if (owner.length < 1 || owner.length > 200) {
    process.stderr.write('--owner must be 1 to 200 characters\n');
    return 2;
  }
  const scopes = values.scopes.split(',').map((s) => s.trim()).filter(Boolean);
  const bad = scopes.filter((s) => !isScope(s));
  if (!scopes.length || bad.length) {
    process.stderr.write(`--scopes must be a comma-separated list of ${SCOPES.join(', ')}\n`);
    return 2;
  }
  const env = loadEnv();
  const database = await resolveDatabase(env);
  const dataSource = await new DataSource(dataSourceOptions({ url: database.url, poolSize: 2, applicationName: 'onejob-apikey' })).initialize();
  try {
    if (env.migrationsRun) await runMigrationsLocked(dataSource);
    const { id, key } = await new ApiKeysService(new ApiKeysRepository(dataSource)).create(owner, scopes.filter(isScope));
    process.stderr.write(`created API key ${id} for owner ${owner} with scopes ${scopes.join(',')}\n`);
    process.stdout.write(`${key}\n`);
    return 0;
  } finally {
    await dataSource.destroy();
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
