import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';

/**
 * The ledger is the only writer of the ledger's tables (docs/design.md#where-each-invariant-lives), by construction:
 * SQL that writes them is in src/ledger/ only, and nothing outside src/ledger/ imports the ledger's statement
 * modules (`*.sql.ts`; eslint.config.mjs says the same at lint time). The two statements outside, named below, are
 * the documented exceptions of docs/design.md §9; each must still be where this list says, so the list cannot rot.
 */
const ROOT = join(import.meta.dirname, '..', '..');
const SRC = join(ROOT, 'src');
const LEDGER_TABLES = ['jobs', 'attempts', 'job_events', 'batches', 'batch_items'];
const VERBS = String.raw`INSERT\s+INTO|UPDATE|DELETE\s+FROM|MERGE\s+INTO|TRUNCATE(?:\s+TABLE)?`;
const WRITE = new RegExp(String.raw`\b(?:${VERBS})\s+(${LEDGER_TABLES.join('|')})\b`, 'gi');
const LEDGER_STATEMENTS = /from\s+'[^']*\/ledger\/[^']+\.sql\.js'/g;

/** file → the tables its documented exception writes. */
const EXCEPTIONS: Record<string, string[]> = {
  // The retention purge: whole terminal histories past their retention, no transition (docs/operations.md#retention).
  'src/retention/retention.sql.ts': ['job_events', 'attempts', 'jobs'],
  // wakeDeferred: a deferred job's due time when its provider opens early; no status, no version, no event.
  'src/capacity/capacity.repository.ts': ['jobs'],
};

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return sources(path);
    return /\.ts$/.test(entry.name) && !/\.spec\.ts$/.test(entry.name) ? [path] : [];
  });
}

const outside = sources(SRC)
  .map((path) => ({ file: relative(ROOT, path), text: readFileSync(path, 'utf8') }))
  .filter(({ file }) => !file.startsWith('src/ledger/'));

describe('the ledger is the only writer', () => {
  it('has no SQL writing jobs, attempts, job_events, batches or batch_items outside src/ledger/', () => {
    const found = outside.flatMap(({ file, text }) =>
      [...text.matchAll(WRITE)]
        .filter((match) => !(EXCEPTIONS[file] ?? []).includes(match[1].toLowerCase()))
        .map((match) => `${file}: ${match[0]}`),
    );
    expect(found).toEqual([]);
  });

  it('keeps each documented exception where it is listed', () => {
    for (const [file, tables] of Object.entries(EXCEPTIONS)) {
      const text = outside.find((source) => source.file === file)?.text ?? '';
      const written = new Set([...text.matchAll(WRITE)].map((match) => match[1].toLowerCase()));
      expect({ file, tables: [...written].sort() }).toEqual({ file, tables: [...tables].sort() });
    }
  });

  it('lets nothing outside src/ledger/ import a statement module of the ledger', () => {
    const found = outside.flatMap(({ file, text }) =>
      [...text.matchAll(LEDGER_STATEMENTS)].map((m) => `${file}: ${m[0]}`),
    );
    expect(found).toEqual([]);
  });
});
