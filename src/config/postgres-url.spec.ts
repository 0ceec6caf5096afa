import { parseEnv } from './env.js';
import { parsePostgresUrl, postgresEndpoint } from './postgres-url.js';

describe('libpq multi-host URLs (docs/operations.md#failover)', () => {
  it('reads every host in order, each with its port or 5432, and keeps the first for node-postgres', () => {
    const target = parsePostgresUrl(
      'postgres://u:p%40ss@db1:5433,db2,[fd00::2]:5434/onejob?target_session_attrs=read-write&sslmode=require',
    );
    expect(target.hosts).toEqual([
      { host: 'db1', port: 5433 },
      { host: 'db2', port: 5432 },
      { host: 'fd00::2', port: 5434 },
    ]);
    expect(target.targetSessionAttrs).toBe('read-write');
    expect(target.url).toBe('postgres://u:p%40ss@db1:5433/onejob?sslmode=require');
  });

  it('takes a single host as before, with target_session_attrs any by default', () => {
    expect(parsePostgresUrl('postgresql://u:p@db:5432/onejob')).toEqual({
      hosts: [{ host: 'db', port: 5432 }],
      targetSessionAttrs: 'any',
      url: 'postgresql://u:p@db:5432/onejob',
    });
  });

  it.each([
    ['mysql://u:p@db/x', 'must be a postgres:// or postgresql:// URL'],
    ['postgres://u:hunter2@db1,db2:99999/x', 'has a port outside 1-65535'],
    ['postgres://u:hunter2@db1,/x', 'has a host that is not host, host:port or [ipv6]:port'],
    ['postgres://u:hunter2@db1,db2/x?target_session_attrs=standby', 'has a target_session_attrs other than'],
  ])('refuses %s, naming what is wrong and never the password', (url, message) => {
    expect(() => parseEnv({ DATABASE_URL: url })).toThrow(message);
    expect(() => parseEnv({ DATABASE_URL: url })).not.toThrow(/hunter2/);
  });

  it('logs hosts and attributes, never the user or the password', () => {
    expect(postgresEndpoint('postgres://u:secret@db1:5432,db2:5433/onejob?target_session_attrs=primary')).toBe(
      'db1:5432,db2:5433/onejob (target_session_attrs=primary)',
    );
  });
});
