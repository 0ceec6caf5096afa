import { EnvError, parseEnv } from './env.js';

describe('parseEnv', () => {
  it('gives the documented defaults for an empty environment', () => {
    expect(parseEnv({})).toMatchObject({
      port: 3000,
      databaseUrl: undefined,
      dataDir: '.data',
      catalogFile: 'config/catalog.yaml',
      role: 'all',
      migrationsRun: true,
    });
  });

  it.each([
    ['PORT', '70000'],
    ['ROLE', 'admin'],
    ['MIGRATIONS_RUN', 'maybe'],
    ['RECONCILE_INTERVAL_MS', '1.5'],
    ['DATABASE_URL', 'not a url with password hunter2'],
    ['WEBHOOK_ALLOWED_HOSTS', 'https://secret-host.example/'],
    ['WEBHOOK_BACKOFF_SCALE', '-3'],
    ['JOB_RETENTION_DAYS', 'forever'],
  ])('names %s and never its value', (name, value) => {
    let error: unknown;
    try {
      parseEnv({ [name]: value });
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(EnvError);
    expect((error as Error).message).toContain(name);
    expect((error as Error).message).not.toContain(value);
  });

  it('parses the delivery and retention settings, with documented defaults', () => {
    expect(parseEnv({})).toMatchObject({
      webhookAllowedHosts: [],
      webhookTimeoutMs: 10_000,
      webhookBackoffScale: 1,
      jobRetentionDays: 30,
      retentionIntervalMs: 300_000,
    });
    expect(
      parseEnv({
        WEBHOOK_ALLOWED_HOSTS: ' 127.0.0.1, Hooks.Internal ,',
        WEBHOOK_BACKOFF_SCALE: '0.001',
        JOB_RETENTION_DAYS: '0',
      }),
    ).toMatchObject({
      webhookAllowedHosts: ['127.0.0.1', 'hooks.internal'],
      webhookBackoffScale: 0.001,
      jobRetentionDays: 0,
    });
    // A fraction of a day: hours (a soak's minutes) of history, for a service that keeps less than a day.
    expect(parseEnv({ JOB_RETENTION_DAYS: '0.25' }).jobRetentionDays).toBe(0.25);
    expect(() => parseEnv({ JOB_RETENTION_DAYS: '-1' })).toThrow(/JOB_RETENTION_DAYS/);
    // Scoped by port; IPv6 bracketed before a port, bare without one.
    expect(
      parseEnv({ WEBHOOK_ALLOWED_HOSTS: '127.0.0.1:4000,[::1]:8080,::1,Hooks.Internal:8443' }).webhookAllowedHosts,
    ).toEqual(['127.0.0.1:4000', '[::1]:8080', '::1', 'hooks.internal:8443']);
    for (const bad of ['127.0.0.1:0', '127.0.0.1:70000', 'host:port', 'http://x/']) {
      expect(() => parseEnv({ WEBHOOK_ALLOWED_HOSTS: bad })).toThrow(/WEBHOOK_ALLOWED_HOSTS/);
    }
  });

  it('reads METRICS_PORT as optional, and refuses it out of range or equal to PORT', () => {
    expect(parseEnv({}).metricsPort).toBeUndefined();
    expect(parseEnv({ METRICS_PORT: '9464' }).metricsPort).toBe(9464);
    expect(() => parseEnv({ METRICS_PORT: '0' })).toThrow(/METRICS_PORT/);
    expect(() => parseEnv({ PORT: '9464', METRICS_PORT: '9464' })).toThrow(/METRICS_PORT: must differ from PORT/);
  });

  it('reads the batch admission bounds with their documented defaults, and names a bad one', () => {
    expect(parseEnv({})).toMatchObject({ maxConcurrentBatches: 4, maxConcurrentBatchesPerOwner: 2 });
    expect(parseEnv({ MAX_CONCURRENT_BATCHES: '8' }).maxConcurrentBatches).toBe(8);
    for (const name of ['MAX_CONCURRENT_BATCHES', 'MAX_CONCURRENT_BATCHES_PER_OWNER']) {
      expect(() => parseEnv({ [name]: '0' })).toThrow(new RegExp(name));
    }
  });

  it('reads the live streams settings with their documented defaults, and names a bad one', () => {
    expect(parseEnv({})).toMatchObject({
      maxStreams: 2000,
      maxStreamsPerOwner: 100,
      streamHeartbeatMs: 15_000,
      streamGraceMs: 15_000,
      streamSweepMs: 30_000,
    });
    expect(parseEnv({ STREAM_GRACE_MS: '0', MAX_STREAMS: '5' })).toMatchObject({ streamGraceMs: 0, maxStreams: 5 });
    for (const name of ['MAX_STREAMS', 'MAX_STREAMS_PER_OWNER', 'STREAM_HEARTBEAT_MS', 'STREAM_SWEEP_MS']) {
      expect(() => parseEnv({ [name]: '0' })).toThrow(new RegExp(name));
    }
  });
});
