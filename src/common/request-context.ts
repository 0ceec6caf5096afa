import { AsyncLocalStorage } from 'node:async_hooks';

/**
 * The id of the request being served, for log lines written deep in services and repositories (the pino mixin in
 * logging.module.ts): set once per request by an onRequest hook in configureApp.
 */
const requestIds = new AsyncLocalStorage<string>();

export function runWithRequestId(requestId: string, next: () => void): void {
  requestIds.run(requestId, next);
}

export function currentRequestId(): string | undefined {
  return requestIds.getStore();
}
