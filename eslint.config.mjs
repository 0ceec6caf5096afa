// The lint gate (npm run lint, in CI before the tests): the rules that catch bugs the compiler does not (a promise
// nobody awaits or handles, a switch that forgets a case, a loose comparison, an unbraced multi-line branch), and
// imports in one order, by tool rather than by hand (`npm run lint -- --fix` orders them).
import js from '@eslint/js';
import prettier from 'eslint-config-prettier';
import simpleImportSort from 'eslint-plugin-simple-import-sort';
import globals from 'globals';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  {
    ignores: [
      'dist/',
      'clients/typescript/dist/',
      'coverage/',
      'test-output/',
      '.data/',
      'clients/typescript/src/schema.ts',
    ],
  },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  // Layout is Prettier's (.prettierrc.json, width 120; `npm run format`): no ESLint rule argues with it.
  prettier,
  {
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
      globals: { ...globals.node },
    },
    plugins: { 'simple-import-sort': simpleImportSort },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': [
        'error',
        { checksVoidReturn: { arguments: false, attributes: false } },
      ],
      '@typescript-eslint/await-thenable': 'error',
      '@typescript-eslint/switch-exhaustiveness-check': ['error', { considerDefaultExhaustiveForUnions: true }],
      '@typescript-eslint/no-unused-vars': [
        'error',
        { argsIgnorePattern: '^_', varsIgnorePattern: '^_', caughtErrors: 'none' },
      ],
      curly: ['error', 'multi-line'],
      eqeqeq: ['error', 'always', { null: 'ignore' }],
      'simple-import-sort/imports': 'error',
      'simple-import-sort/exports': 'error',
    },
  },
  // The ledger is the only writer (docs/design.md#9-layout): its statements (src/ledger/*.sql.ts) are imported in
  // src/ledger/ only. src/ledger/only-writer.spec.ts also scans src/ for SQL writing the ledger's tables.
  {
    files: ['src/**/*.ts'],
    ignores: ['src/ledger/**'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              group: ['**/ledger/*.sql.js'],
              message: "The ledger's statements run from src/ledger/ only: call the Ledger (or its read repositories).",
            },
          ],
        },
      ],
    },
  },
  {
    files: ['**/*.js', '**/*.mjs'],
    extends: [tseslint.configs.disableTypeChecked],
  },
  // Prettier wraps code at 120 but not strings, SQL in template literals or comments: in src/, this rule does.
  { files: ['src/**/*.ts', 'src/**/*.js'], rules: { 'max-len': ['error', { code: 120, tabWidth: 2 }] } },
  // The console runs in the browser.
  { files: ['src/console/static/**/*.js'], languageOptions: { globals: { ...globals.browser } } },
  // Tests read JSON bodies of many shapes; `any` there is a reading aid, not a hole in the service's types.
  {
    files: ['test/**/*.ts', '**/*.spec.ts', 'clients/typescript/test/**/*.ts'],
    rules: { '@typescript-eslint/no-explicit-any': 'off' },
  },
);
