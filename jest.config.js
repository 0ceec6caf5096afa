/** ESM TypeScript through @swc/jest (decorators and their metadata on), against a real PostgreSQL. */
const swc = {
  swcrc: false,
  sourceMaps: 'inline',
  module: { type: 'es6' },
  jsc: {
    target: 'es2022',
    parser: { syntax: 'typescript', decorators: true },
    transform: { legacyDecorator: true, decoratorMetadata: true, useDefineForClassFields: false },
    keepClassNames: true,
  },
};

export default {
  testEnvironment: 'node',
  extensionsToTreatAsEsm: ['.ts'],
  transform: { '^.+\\.ts$': ['@swc/jest', swc] },
  moduleNameMapper: { '^(\\.{1,2}/.*)\\.js$': '$1' },
  testMatch: [
    '<rootDir>/src/**/*.spec.ts',
    '<rootDir>/test/**/*.e2e-spec.ts',
    // The middle tier: one repository or statement on a real PostgreSQL, no app around it.
    '<rootDir>/test/medium/**/*.spec.ts',
    '<rootDir>/test/race/**/*.race-spec.ts',
    '<rootDir>/clients/typescript/test/**/*.e2e-spec.ts',
  ],
  modulePathIgnorePatterns: ['<rootDir>/clients/typescript/dist/'],
  globalSetup: '<rootDir>/test/global-setup.mjs',
  globalTeardown: '<rootDir>/test/global-teardown.mjs',
  testTimeout: 30_000,
  maxWorkers: 2,
  // A worker past this after a test file is replaced by a fresh one. A worker that ran forty suites holds 1.5-2 GB
  // of heap (each suite's module registry), and freeing it as the process exits took 390-490 ms, against jest's
  // 500 ms before "a worker process has failed to exit gracefully" (no handle was open: the exit itself was slow).
  workerIdleMemoryLimit: '800MB',
};
