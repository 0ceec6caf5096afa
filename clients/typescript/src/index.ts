export { OnejobClient, type CreatedJob, type OnejobClientOptions, type RetryOptions } from './client.js';
export * from './errors.js';
export * from './types.js';
export { uuidv7 } from './uuidv7.js';
export type { components, operations, paths } from './schema.js';
