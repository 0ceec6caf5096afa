import { AsyncLocalStorage } from 'node:async_hooks';

/**
 * The request being served, for what runs deep in services and repositories: its id for log lines (the pino mixin
 * in logging.module.ts), and the fact that a client is waiting, which gives its database queries the request
 * path's shorter bound (DB_REQUEST_TIMEOUT_MS, src/database/data-source.options.ts). Set once per request by an
 * onRequest hook in configureApp.
 */
const requests = new AsyncLocalStorage<string>();

export function runWithRequestId(requestId: string, next: () => void): void {
  requests.run(requestId, next);
}

export function currentRequestId(): string | undefined {
  return requests.getStore();
}
