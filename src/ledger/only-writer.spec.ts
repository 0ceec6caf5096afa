import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';

import ts from 'typescript';

/**
 * The ledger is the only writer of the ledger's tables (docs/design.md#where-each-invariant-lives), by construction:
 * SQL that writes them is in src/ledger/ only, and nothing outside src/ledger/ imports the ledger's statement
 * modules (`*.sql.ts`; eslint.config.mjs says the same at lint time). The two statements outside, named below, are
 * the documented exceptions of docs/design.md §9; each must still be where this list says, so the list cannot rot.
 */
const ROOT = join(import.meta.dirname, '..', '..');
const SRC = join(ROOT, 'src');
const LEDGER_TABLES = ['jobs', 'attempts', 'job_events', 'batches', 'batch_items', 'owner_queue'];
const VERBS = String.raw`INSERT\s+INTO|UPDATE|DELETE\s+FROM|MERGE\s+INTO|TRUNCATE(?:\s+TABLE)?`;
const WRITE = new RegExp(String.raw`\b(?:${VERBS})\s+(${LEDGER_TABLES.join('|')})\b`, 'gi');
const LEDGER_STATEMENTS = /from\s+'[^']*\/ledger\/[^']+\.sql\.js'/g;

/** file → the tables its documented exception writes. */
const EXCEPTIONS: Record<string, string[]> = {
  // The retention purge: whole terminal histories past their retention, no transition (docs/operations.md#retention).
  'src/retention/retention.sql.ts': ['job_events', 'attempts', 'jobs'],
  // WAKE_DEFERRED: a deferred job's due time when its provider opens early; no status, no version, no event.
  'src/capacity/capacity.sql.ts': ['jobs'],
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
  it('has no SQL writing jobs, attempts, job_events, batches, batch_items or owner_queue outside src/ledger/', () => {
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

/**
 * The write side of the ledger's repositories, by type: a repository method (src/ledger/*.repository.ts) whose body
 * sends a statement that writes a ledger table is called from nowhere outside src/ledger/. The repositories are
 * exported for their reads; this is what keeps their writes the ledger's (docs/design.md §9).
 */
describe('the repositories exported for their reads', () => {
  const ledgerDir = join(SRC, 'ledger');
  const all = sources(SRC);
  const program = ts.createProgram(all, {
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    experimentalDecorators: true,
    skipLibCheck: true,
    noEmit: true,
    types: [],
  });
  const checker = program.getTypeChecker();
  const ledgerFile = (file: ts.SourceFile) => file.fileName.startsWith(`${ledgerDir}/`);

  /** The exported statements of src/ledger/*.sql.ts whose SQL writes a ledger table. */
  const writes = new Set<string>();
  for (const file of program.getSourceFiles().filter((f) => ledgerFile(f) && f.fileName.endsWith('.sql.ts'))) {
    for (const node of file.statements) {
      if (!ts.isVariableStatement(node)) continue;
      for (const declaration of node.declarationList.declarations) {
        const text = declaration.initializer?.getText(file) ?? '';
        if (new RegExp(WRITE.source, 'i').test(text)) writes.add(declaration.name.getText(file));
      }
    }
  }

  /** Repository methods that send one of them, by their declaration. */
  const writeMethods = new Map<ts.Node, string>();
  for (const file of program.getSourceFiles().filter((f) => ledgerFile(f) && f.fileName.endsWith('.repository.ts'))) {
    file.forEachChild(function visit(node) {
      if (ts.isMethodDeclaration(node) && node.body && ts.isClassDeclaration(node.parent)) {
        const used = new Set<string>();
        node.body.forEachChild(function names(n) {
          if (ts.isIdentifier(n)) used.add(n.text);
          n.forEachChild(names);
        });
        if ([...used].some((name) => writes.has(name))) {
          writeMethods.set(node, `${node.parent.name?.text}.${node.name.getText(file)}`);
        }
      }
      node.forEachChild(visit);
    });
  }

  it('finds the write side (the create, the claim, the settlement, the events are among it)', () => {
    const names = new Set(writeMethods.values());
    for (const name of ['JobsRepository.insertJob', 'AttemptsRepository.markRunning', 'JobEventsRepository.append']) {
      expect(names).toContain(name);
    }
  });

  it('has no call of a repository write method outside src/ledger/', () => {
    const found: string[] = [];
    for (const file of program.getSourceFiles().filter((f) => f.fileName.startsWith(`${SRC}/`) && !ledgerFile(f))) {
      file.forEachChild(function visit(node) {
        if (ts.isCallExpression(node) && ts.isPropertyAccessExpression(node.expression)) {
          const symbol = checker.getSymbolAtLocation(node.expression.name);
          for (const declaration of symbol?.declarations ?? []) {
            const name = writeMethods.get(declaration);
            if (name) found.push(`${relative(ROOT, file.fileName)}: ${name}`);
          }
        }
        node.forEachChild(visit);
      });
    }
    expect(found).toEqual([]);
  });
});
