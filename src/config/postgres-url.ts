/**
 * libpq's URI form, with several hosts (docs/operations.md#failover): `postgres://u:p@h1:5432,h2:5433/db?
 * target_session_attrs=read-write`. node-postgres reads one host only (brianc/node-postgres#1470), so the list and
 * the session attributes are read here, and every connection is made to one host of it
 * (src/database/primary-locator.ts).
 */
export type TargetSessionAttrs = 'any' | 'read-write' | 'primary';

export interface PostgresHost {
  host: string;
  port: number;
}

export interface PostgresTarget {
  hosts: PostgresHost[];
  targetSessionAttrs: TargetSessionAttrs;
  /** The URL with the first host alone and without target_session_attrs: what node-postgres and TypeORM read. */
  url: string;
}

const SESSION_ATTRS: readonly TargetSessionAttrs[] = ['any', 'read-write', 'primary'];
const DEFAULT_PORT = 5432;

export class PostgresUrlError extends Error {}

function parseHost(spec: string): PostgresHost {
  const bracketed = /^\[([0-9a-fA-F:.]+)\](?::(\d{1,5}))?$/.exec(spec);
  const plain = bracketed ? null : /^([^:[\]]+)(?::(\d{1,5}))?$/.exec(spec);
  const match = bracketed ?? plain;
  if (!match) throw new PostgresUrlError('has a host that is not host, host:port or [ipv6]:port');
  const port = match[2] === undefined ? DEFAULT_PORT : Number(match[2]);
  if (port < 1 || port > 65_535) throw new PostgresUrlError('has a port outside 1-65535');
  return { host: match[1], port };
}

/** Parses a postgres:// or postgresql:// URL with one host or several. Errors never echo the URL. */
export function parsePostgresUrl(raw: string): PostgresTarget {
  const match = /^(postgres(?:ql)?):\/\/(?:([^@/?#]*)@)?([^/?#]*)([^?#]*)(\?[^#]*)?$/.exec(raw.trim());
  if (!match) throw new PostgresUrlError('must be a postgres:// or postgresql:// URL');
  const [, scheme, userinfo, hostspec, path, query] = match;
  const hosts = hostspec === '' ? [] : hostspec.split(',').map(parseHost);
  const params = new URLSearchParams(query?.slice(1) ?? '');
  const attrs = (params.get('target_session_attrs') ?? 'any') as TargetSessionAttrs;
  if (!SESSION_ATTRS.includes(attrs)) {
    throw new PostgresUrlError(`has a target_session_attrs other than ${SESSION_ATTRS.join(', ')}`);
  }
  params.delete('target_session_attrs');
  const first = hosts[0];
  const host = first ? `${first.host.includes(':') ? `[${first.host}]` : first.host}:${first.port}` : '';
  const rest = params.size ? `?${params.toString()}` : '';
  const url = `${scheme}://${userinfo !== undefined ? `${userinfo}@` : ''}${host}${path}${rest}`;
  try {
    new URL(url);
  } catch {
    throw new PostgresUrlError('must be a postgres:// or postgresql:// URL');
  }
  return { hosts, targetSessionAttrs: attrs, url };
}

/** `host:port,host:port/database` of a URL, for logs: never the user or the password. */
export function postgresEndpoint(raw: string): string {
  try {
    const target = parsePostgresUrl(raw);
    const path = new URL(target.url).pathname;
    const hosts = target.hosts.map((h) => `${h.host}:${h.port}`).join(',');
    const attrs = target.targetSessionAttrs === 'any' ? '' : ` (target_session_attrs=${target.targetSessionAttrs})`;
    return `${hosts}${path}${attrs}`;
  } catch {
    return '(unparsable URL)';
  }
}
