import { AsyncLocalStorage } from 'node:async_hooks';

/**
 * The request being served, for what runs deep in services and repositories: its id for log lines (the pino mixin
 * in logging.module.ts), and the fact that a client is waiting, which gives its database queries the request
 * path's shorter bound (DB_REQUEST_TIMEOUT_MS, src/database/data-source.options.ts). Set once per request by an
 * onRequest hook in configureApp.
 */
interface RequestState {
  id: string;
  /** When the request arrived (epoch ms): its database work, retries included, ends by DB_REQUEST_TIMEOUT_MS after. */
  startedAt: number;
}

const requests = new AsyncLocalStorage<RequestState>();

export function runWithRequestId(requestId: string, next: () => void): void {
  requests.run({ id: requestId, startedAt: Date.now() }, next);
}

export function currentRequestId(): string | undefined {
  return requests.getStore()?.id;
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

/** DB_REQUEST_TIMEOUT_MS, as the data source was given it (dataSourceOptions); unset: no request budget. */
let requestBudgetMs: number | undefined;

export function setRequestBudget(ms: number | undefined): void {
  requestBudgetMs = ms;
}

/**
 * Where a request's database work must end, for work that started at `startedAt` (epoch ms): DB_REQUEST_TIMEOUT_MS
 * after it. Undefined off the request path: the background retries at its own pace.
 */
export function requestDeadline(startedAt: number): number | undefined {
  return requestBudgetMs !== undefined && requestBoundApplies() ? startedAt + requestBudgetMs : undefined;
}

/** The pause before a statement runs again on a fresh connection: long enough for a promotion to be seen. */
const RETRY_PAUSE_MS = 250;
/** A retry that could not finish within the request's budget is not made: the client gets its 503 in time. */
const RETRY_MIN_BUDGET_MS = 750;

/** Whether work that failed before it could commit may run once more now (docs/operations.md#failover). */
export function retryAllowed(deadline: number | undefined): boolean {
  return deadline === undefined || deadline - Date.now() >= RETRY_MIN_BUDGET_MS + RETRY_PAUSE_MS;
}

const retries = new AsyncLocalStorage<number>();

/** Runs the retry after a pause, its queries bounded by what is left until `deadline` (OnejobClient). */
export async function retryWithin<T>(deadline: number | undefined, work: () => Promise<T>): Promise<T> {
  await new Promise((resolve) => setTimeout(resolve, RETRY_PAUSE_MS));
  return deadline === undefined ? work() : retries.run(deadline, work);
}

/** What is left (ms) until the deadline of the retry running now, if one runs. */
export function retryTimeLeft(): number | undefined {
  const deadline = retries.getStore();
  return deadline === undefined ? undefined : deadline - Date.now();
}
