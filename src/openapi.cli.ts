import 'reflect-metadata';

import { readFileSync, writeFileSync } from 'node:fs';

import { NestFactory } from '@nestjs/core';
import type { NestFastifyApplication } from '@nestjs/platform-fastify';

import { AppModule } from './app.module.js';
import { buildOpenApiDocument, configureApp, createAdapter } from './app.setup.js';
import { canonicalJson } from './common/canonical-json.js';
import { parseEnv } from './config/env.js';

/** Sorted keys, two-space indent: a stable text that diffs well. */
function stableStringify(value: unknown): string {
  return `${JSON.stringify(JSON.parse(canonicalJson(value)), null, 2)}\n`;
}

async function render(): Promise<string> {
  // Preview mode reads the module graph and route metadata without creating providers: no database needed.
  const app = await NestFactory.create<NestFastifyApplication>(
    AppModule.forRoot({ databaseUrl: 'postgres://unused/none' }),
    createAdapter(parseEnv({})),
    {
      preview: true,
      logger: false,
    },
  );
  await configureApp(app);
  const document = buildOpenApiDocument(app);
  await app.close();
  return stableStringify(document);
}

async function main(): Promise<number> {
  const [mode, file] = process.argv.slice(2);
  if ((mode !== 'write' && mode !== 'check') || !file) {
    process.stderr.write('usage: openapi.cli (write|check) FILE\n');
    return 2;
  }
  const text = await render();
  if (mode === 'write') {
    writeFileSync(file, text);
    process.stdout.write(`wrote ${file}\n`);
    return 0;
  }
  let committed = '';
  try {
    committed = readFileSync(file, 'utf8');
  } catch {
    // a missing file is drift too
  }
  if (committed !== text) {
    process.stderr.write(`${file} is out of date with the code: run \`npm run openapi\` and commit the result.\n`);
    return 1;
  }
  process.stdout.write(`${file} matches the code\n`);
  return 0;
}

main().then(
  (code) => process.exit(code),
  (error: Error) => {
    process.stderr.write(`openapi failed: ${error.stack}\n`);
    process.exit(1);
  },
);
