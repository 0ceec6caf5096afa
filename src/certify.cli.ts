import 'reflect-metadata';

import { parseArgs } from 'node:util';

import { NestFactory } from '@nestjs/core';

import { AppModule } from './app.module.js';
import { loadEnv } from './config/app.config.js';
import { resolveDatabase } from './database/database-url.js';
import { CertificationService } from './providers/certification.service.js';

/** npm run certify -- --provider P --operation O: prints the report as JSON; exit 0 when it passed, 1 when not. */
async function main(): Promise<number> {
  const { values } = parseArgs({ options: { provider: { type: 'string' }, operation: { type: 'string' } } });
  if (!values.provider || !values.operation) {
    process.stderr.write('usage: npm run certify -- --provider PROVIDER --operation OPERATION\n');
    return 2;
  }
  const database = await resolveDatabase(loadEnv());
  const context = await NestFactory.createApplicationContext(
    AppModule.forRoot({ databaseUrl: database.url, role: 'api' }),
    { logger: ['error'] },
  );
  try {
    const report = await context.get(CertificationService).certify(values.provider, values.operation);
    process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
    return report.passed ? 0 : 1;
  } finally {
    await context.close();
    await database.stop();
  }
}

main().then(
  (code) => process.exit(code),
  (error: Error) => {
    process.stderr.write(`certify failed: ${error.message}\n`);
    process.exit(2);
  },
);
