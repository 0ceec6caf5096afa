export {
  type CreatedBatch,
  type CreatedJob,
  OnejobClient,
  type OnejobClientOptions,
  type RetryOptions,
} from './client.js';
export * from './errors.js';
export type { components, operations, paths } from './schema.js';
export * from './types.js';
export { uuidv7 } from './uuidv7.js';
