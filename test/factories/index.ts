// Test data built the way the service builds it (docs/testing.md#factories): keys, jobs and attempts in any state.
export * from './attempts.factory.js';
export * from './jobs.factory.js';
export * from './keys.factory.js';
