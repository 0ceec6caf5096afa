import { parsePostgresUrl, PostgresUrlError } from './postgres-url.js';

/** Environment variables, parsed and validated in one place. Errors name the variable, never its value. */
export type Role = 'api' | 'worker' | 'all';
export type LogLevel = 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent';

export interface Env {
  port: number;
  host: string;
  databaseUrl: string | undefined;
  /** A session (non-pooled) connection for LISTEN and advisory locks; falls back to databaseUrl. */
  databaseDirectUrl: string | undefined;
  dataDir: string;
  catalogFile: string;
  /** The JWT issuers onejob trusts beside API keys (a YAML file); unset: API keys only. */
  authIssuersFile: string | undefined;
  /** How long a stream token lives (at most 900 s: a token in a URL is short-lived by rule). */
  streamTokenTtlSeconds: number;
  role: Role;
  migrationsRun: boolean;
  workerConcurrency: number;
  maxConcurrentWaits: number;
  workerPollMs: number;
  reconcileIntervalMs: number;
  shutdownGraceMs: number;
  dbPoolSize: number;
  /** Client-side bound on one query: a frozen server never fires its own statement_timeout. */
  dbQueryTimeoutMs: number;
  /** The same bound for the queries of an HTTP request, shorter: a client must get its 503 before its own timeout. */
  dbRequestTimeoutMs: number;
  /** Refuse to start unless the primary replicates synchronously to a standby (docs/operations.md#failover). */
  requireSynchronousReplication: boolean;
  /** The hot statements go named (prepared once per connection); off behind a pooler that cannot track them. */
  dbPreparedStatements: boolean;
  bodyLimitBytes: number;
  /** The body limit of POST /v1/batches alone (10,000 items); every other route keeps bodyLimitBytes. */
  batchBodyLimitBytes: number;
  /**
   * Batch creates one process runs at once, and one owner runs in one process: each holds a pool connection, its
   * new keys and its FOR SHARE locks for its whole transaction (503 beyond).
   */
  maxConcurrentBatches: number;
  maxConcurrentBatchesPerOwner: number;
  logLevel: LogLevel;
  /** `host:port` (or a bare host: default ports only) a webhook may name over http, skipping the address checks. */
  webhookAllowedHosts: string[];
  webhookTimeoutMs: number;
  /** Multiplies the retry schedule (1 = 5 s ... 12 h); tests shrink it. */
  webhookBackoffScale: number;
  webhookPollMs: number;
  webhookConcurrency: number;
  /** Endpoints one owner may have at once (each settled job is one delivery per endpoint). */
  webhookMaxEndpointsPerOwner: number;
  /** Terminal jobs older than this many days (a fraction allowed) are purged with all of theirs; 0 keeps them. */
  jobRetentionDays: number;
  retentionIntervalMs: number;
  /** The bound on resolving one host name for an outbound call (webhooks, providers). */
  dnsTimeoutMs: number;
  /** DNS servers for outbound calls (`ip` or `ip:port`); empty: the system's. */
  dnsServers: string[];
  /** The first API key a container's bootstrap stores (an operator's secret), instead of printing a new one. */
  bootstrapApiKey: string | undefined;
  /** When set, /metrics is served on this port only (its own listener), not on PORT. */
  metricsPort: number | undefined;
  /** Live event streams (text/event-stream) one process holds at once, and one owner holds in one process. */
  maxStreams: number;
  maxStreamsPerOwner: number;
  /** A comment line on every idle stream this often, so proxies and clients see it alive. */
  streamHeartbeatMs: number;
  /** How long a job's stream stays open after its terminal event, for a late `result_discarded`. */
  streamGraceMs: number;
  /** Every open stream's timeline is checked this often in one query, in case a NOTIFY was lost. */
  streamSweepMs: number;
}

/** The shape of every API key: `oj_` and 32 random bytes, URL-safe (an operator's own: 32 to 200 such characters). */
export const API_KEY_PATTERN = /^oj_[A-Za-z0-9_-]{32,200}$/;

export class EnvError extends Error {
  constructor(
    readonly variable: string,
    expectation: string,
  ) {
    super(`Invalid environment variable ${variable}: ${expectation}`);
    this.name = 'EnvError';
  }
}

type Source = Record<string, string | undefined>;

function text(source: Source, name: string, fallback: string): string {
  const value = source[name];
  if (value === undefined || value === '') return fallback;
  return value;
}

function integer(source: Source, name: string, fallback: number, min: number, max: number): number {
  const raw = source[name];
  if (raw === undefined || raw === '') return fallback;
  if (!/^\d+$/.test(raw.trim())) throw new EnvError(name, `must be a whole number from ${min} to ${max}`);
  const value = Number(raw.trim());
  if (value < min || value > max) throw new EnvError(name, `must be a whole number from ${min} to ${max}`);
  return value;
}

function oneOf<T extends string>(source: Source, name: string, fallback: T, allowed: readonly T[]): T {
  const raw = source[name];
  if (raw === undefined || raw === '') return fallback;
  const value = raw.trim().toLowerCase() as T;
  if (!allowed.includes(value)) throw new EnvError(name, `must be one of ${allowed.join(', ')}`);
  return value;
}

function bool(source: Source, name: string, fallback: boolean): boolean {
  return (
    oneOf(source, name, fallback ? 'true' : 'false', ['true', 'false', '1', '0'] as const).match(/^(true|1)$/) !== null
  );
}

function decimal(source: Source, name: string, fallback: number, min: number, max: number): number {
  const raw = source[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw.trim());
  if (!/^\d+(\.\d+)?$/.test(raw.trim()) || value < min || value > max) {
    throw new EnvError(name, `must be a number from ${min} to ${max}`);
  }
  return value;
}

/**
 * WEBHOOK_ALLOWED_HOSTS: `host:port` (that port only) or a bare host (the scheme's default port only), IPv6
 * bracketed when a port follows. Kept in the spelling URL.host uses, so a delivery's URL compares as is.
 */
function hostList(source: Source, name: string): string[] {
  const raw = source[name] ?? '';
  const entries = raw
    .split(',')
    .map((h) => h.trim().toLowerCase())
    .filter(Boolean);
  const invalid = () =>
    new EnvError(name, 'must be a comma-separated list of hosts or IP addresses, each with an optional :port');
  return entries.map((entry) => {
    const bareIPv6 = /^[0-9a-f:.]+$/.test(entry) && entry.split(':').length > 2;
    const match = bareIPv6
      ? [entry, `[${entry}]`, undefined]
      : /^(\[[0-9a-f:.]+\]|[a-z0-9.-]{1,253})(?::(\d{1,5}))?$/.exec(entry);
    if (!match) throw invalid();
    const port = match[2] === undefined ? undefined : Number(match[2]);
    if (port !== undefined && (port < 1 || port > 65_535)) throw invalid();
    let url: URL;
    try {
      url = new URL(`http://${match[1]}${port === undefined ? '' : `:${port}`}`);
    } catch {
      throw invalid();
    }
    // A bare host stays bare (default port); a port equal to http's default is kept as written.
    const host = url.hostname;
    return port === undefined ? host.replace(/^\[(.*)\]$/, '$1') : `${host}:${port}`;
  });
}

function serverList(source: Source, name: string): string[] {
  const raw = source[name] ?? '';
  const servers = raw
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  // An IPv4 address with an optional port, or an IPv6 one (bracketed when it has a port).
  const valid = /^(\d{1,3}(\.\d{1,3}){3}(:\d{1,5})?|\[[0-9a-f:]+\](:\d{1,5})?|[0-9a-f:]+)$/i;
  if (servers.some((s) => !valid.test(s))) {
    throw new EnvError(name, 'must be a comma-separated list of IP addresses, each with an optional :port');
  }
  return servers;
}

function apiKey(source: Source, name: string): string | undefined {
  const raw = source[name];
  if (raw === undefined || raw.trim() === '') return undefined;
  if (!API_KEY_PATTERN.test(raw.trim())) {
    throw new EnvError(name, 'must be oj_ followed by 32 to 200 letters, digits, - or _');
  }
  return raw.trim();
}

function databaseUrl(source: Source, name: 'DATABASE_URL' | 'DATABASE_DIRECT_URL'): string | undefined {
  const raw = source[name];
  if (raw === undefined || raw.trim() === '') return undefined;
  try {
    parsePostgresUrl(raw);
  } catch (error) {
    // The parser's messages name the part that is wrong, never the value.
    throw new EnvError(name, error instanceof PostgresUrlError ? error.message : 'must be a postgres:// URL');
  }
  return raw.trim();
}

function metricsPort(source: Source, port: number): number | undefined {
  if (source.METRICS_PORT === undefined || source.METRICS_PORT.trim() === '') return undefined;
  const value = integer(source, 'METRICS_PORT', 0, 1, 65535);
  if (value === port) throw new EnvError('METRICS_PORT', 'must differ from PORT');
  return value;
}

export function parseEnv(source: Source): Env {
  const port = integer(source, 'PORT', 3000, 0, 65535);
  return {
    port,
    host: text(source, 'HOST', '0.0.0.0'),
    databaseUrl: databaseUrl(source, 'DATABASE_URL'),
    databaseDirectUrl: databaseUrl(source, 'DATABASE_DIRECT_URL'),
    dataDir: text(source, 'DATA_DIR', '.data'),
    catalogFile: text(source, 'CATALOG_FILE', 'config/catalog.yaml'),
    authIssuersFile: source.AUTH_ISSUERS_FILE?.trim() || undefined,
    streamTokenTtlSeconds: integer(source, 'STREAM_TOKEN_TTL_SECONDS', 900, 1, 900),
    role: oneOf(source, 'ROLE', 'all', ['api', 'worker', 'all'] as const),
    migrationsRun: bool(source, 'MIGRATIONS_RUN', true),
    // Calls waiting on providers cost almost nothing in Node: the window is sized for I/O, not for cores.
    workerConcurrency: integer(source, 'WORKER_CONCURRENCY', 256, 1, 10_000),
    maxConcurrentWaits: integer(source, 'MAX_CONCURRENT_WAITS', 1000, 1, 100_000),
    // The fallback: NOTIFY wakes workers at once; polling covers a missed one.
    workerPollMs: integer(source, 'WORKER_POLL_MS', 500, 5, 60_000),
    reconcileIntervalMs: integer(source, 'RECONCILE_INTERVAL_MS', 1000, 50, 3_600_000),
    shutdownGraceMs: integer(source, 'SHUTDOWN_GRACE_MS', 10_000, 0, 600_000),
    dbPoolSize: integer(source, 'DB_POOL_SIZE', 20, 1, 1000),
    dbQueryTimeoutMs: integer(source, 'DB_QUERY_TIMEOUT_MS', 16_000, 100, 600_000),
    dbRequestTimeoutMs: integer(source, 'DB_REQUEST_TIMEOUT_MS', 4_000, 100, 600_000),
    dbPreparedStatements: bool(source, 'DB_PREPARED_STATEMENTS', true),
    requireSynchronousReplication: bool(source, 'REQUIRE_SYNCHRONOUS_REPLICATION', false),
    bodyLimitBytes: integer(source, 'BODY_LIMIT_BYTES', 1_048_576, 1024, 104_857_600),
    batchBodyLimitBytes: integer(source, 'BATCH_BODY_LIMIT_BYTES', 16_777_216, 1024, 268_435_456),
    // A fifth of the default pool: single creates, claims and settlements keep the rest.
    maxConcurrentBatches: integer(source, 'MAX_CONCURRENT_BATCHES', 4, 1, 1000),
    maxConcurrentBatchesPerOwner: integer(source, 'MAX_CONCURRENT_BATCHES_PER_OWNER', 2, 1, 1000),
    logLevel: oneOf(source, 'LOG_LEVEL', 'info', [
      'fatal',
      'error',
      'warn',
      'info',
      'debug',
      'trace',
      'silent',
    ] as const),
    webhookAllowedHosts: hostList(source, 'WEBHOOK_ALLOWED_HOSTS'),
    webhookTimeoutMs: integer(source, 'WEBHOOK_TIMEOUT_MS', 10_000, 100, 60_000),
    webhookBackoffScale: decimal(source, 'WEBHOOK_BACKOFF_SCALE', 1, 0.0001, 100),
    webhookPollMs: integer(source, 'WEBHOOK_POLL_MS', 1000, 5, 60_000),
    webhookConcurrency: integer(source, 'WEBHOOK_CONCURRENCY', 16, 1, 1000),
    webhookMaxEndpointsPerOwner: integer(source, 'WEBHOOK_MAX_ENDPOINTS_PER_OWNER', 20, 1, 1000),
    jobRetentionDays: decimal(source, 'JOB_RETENTION_DAYS', 30, 0, 36_500),
    retentionIntervalMs: integer(source, 'RETENTION_INTERVAL_MS', 300_000, 50, 86_400_000),
    dnsTimeoutMs: integer(source, 'DNS_TIMEOUT_MS', 2_000, 50, 60_000),
    dnsServers: serverList(source, 'DNS_SERVERS'),
    bootstrapApiKey: apiKey(source, 'ONEJOB_BOOTSTRAP_KEY'),
    metricsPort: metricsPort(source, port),
    maxStreams: integer(source, 'MAX_STREAMS', 2000, 1, 100_000),
    maxStreamsPerOwner: integer(source, 'MAX_STREAMS_PER_OWNER', 100, 1, 100_000),
    streamHeartbeatMs: integer(source, 'STREAM_HEARTBEAT_MS', 15_000, 50, 600_000),
    streamGraceMs: integer(source, 'STREAM_GRACE_MS', 15_000, 0, 600_000),
    streamSweepMs: integer(source, 'STREAM_SWEEP_MS', 30_000, 50, 3_600_000),
  };
}
