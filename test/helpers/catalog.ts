import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { parse, stringify } from 'yaml';

import { TEST_CATALOG } from './app.js';

export type RawCatalog = { providers: any[]; operations: any[] };

/** Writes a variant of the test catalog to a temp file and returns its path. */
export function writeCatalog(mutate: (catalog: RawCatalog) => void, base = TEST_CATALOG): string {
  const catalog = parse(readFileSync(base, 'utf8')) as RawCatalog;
  mutate(catalog);
  const file = join(mkdtempSync(join(tmpdir(), 'onejob-catalog-')), 'catalog.yaml');
  writeFileSync(file, stringify(catalog));
  return file;
}

export function provider(catalog: RawCatalog, name: string) {
  const found = catalog.providers.find((p) => p.name === name);
  if (!found) throw new Error(`no provider ${name} in the test catalog`);
  return found;
}
