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

const backgroundBound = new AsyncLocalStorage<true>();

/**
 * Runs `work` with the background's query bound (DB_QUERY_TIMEOUT_MS) though a client waits: for a write whose size
 * the client chose, a batch of up to 10,000 jobs in one statement, which the request's shorter bound would cut off
 * on a busy database while it is doing what was asked. Log lines keep the request id.
 */
export function withBackgroundQueryBound<T>(work: () => Promise<T>): Promise<T> {
  return backgroundBound.run(true, work);
}

/** Whether a query now gets the request path's bound: a client waits, and no withBackgroundQueryBound lifted it. */
export function requestBoundApplies(): boolean {
  return requests.getStore() !== undefined && backgroundBound.getStore() !== true;
}
