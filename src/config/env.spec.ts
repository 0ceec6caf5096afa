import { EnvError, parseEnv } from './env.js';

describe('parseEnv', () => {
  it('gives the documented defaults for an empty environment', () => {
    expect(parseEnv({})).toMatchObject({ port: 3000, databaseUrl: undefined, dataDir: '.data', catalogFile: 'config/catalog.yaml', role: 'all', migrationsRun: true });
  });

  it.each([
    ['PORT', '70000'],
    ['ROLE', 'admin'],
    ['MIGRATIONS_RUN', 'maybe'],
    ['RECONCILE_INTERVAL_MS', '1.5'],
    ['DATABASE_URL', 'not a url with password hunter2'],
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
});
