import { Resolver } from 'node:dns/promises';
import { readFileSync, statSync } from 'node:fs';
import { isIP, type LookupFunction } from 'node:net';

export interface HostLookupOptions {
  /** The bound on one name's resolution, every server and retry included. */
  timeoutMs: number;
  /** DNS servers (`ip` or `ip:port`); the system's (/etc/resolv.conf) when empty. */
  servers?: readonly string[];
  hostsFile?: string;
  /** Where the `search` domains and `ndots` come from (a short in-cluster name like `vllm` needs them). */
  resolvConf?: string;
}

export interface ResolvedAddress {
  address: string;
  family: 4 | 6;
}

/** A name that did not resolve in time or at all; `code` as node:dns gives it (ETIMEOUT, ENOTFOUND, ...). */
export class HostLookupError extends Error {
  constructor(
    readonly hostname: string,
    readonly code: string,
    message: string,
  ) {
    super(message);
    this.name = 'HostLookupError';
  }
}

/**
 * Name resolution bounded in time and kept off libuv's thread pool: `dns.lookup` (getaddrinfo) runs on that
 * pool's 4 threads, so 4 names whose DNS server never answers stall every other lookup of the process, file
 * reads and crypto included, for as long as the resolver's own retries last. This reads the hosts file itself
 * (re-read when it changes) and asks DNS through c-ares (`dns.promises.Resolver`, asynchronous, no thread),
 * A and AAAA at once, with a deadline of its own. Like the system resolver it applies resolv.conf's `search`
 * domains and `ndots` (c-ares' query API does not), so a Kubernetes service's short name resolves. It is the
 * `lookup` of the HTTP agents of webhooks and providers, so what a call connects to is what this returned
 * (docs/operations.md#name-resolution).
 */
export class HostLookup {
  private readonly resolver: Resolver;
  private readonly hostsFile: string;
  private hosts: { mtimeMs: number; names: Map<string, ResolvedAddress[]> } | undefined;
  private readonly resolvConf: string;
  private search: { mtimeMs: number; domains: string[]; ndots: number } | undefined;
  /** The lookups under way, each one's way to end now (close). */
  private readonly pending = new Set<() => void>();
  private closed = false;

  constructor(private readonly options: HostLookupOptions) {
    // c-ares' own timeout is per try and server; ours below bounds the whole resolution.
    this.resolver = new Resolver({ timeout: Math.max(1, options.timeoutMs), tries: 1 });
    if (options.servers?.length) this.resolver.setServers([...options.servers]);
    this.hostsFile = options.hostsFile ?? '/etc/hosts';
    this.resolvConf = options.resolvConf ?? '/etc/resolv.conf';
  }

  /** Every address of `hostname`, hosts file first; throws HostLookupError when none comes in time. */
  async resolve(hostname: string): Promise<ResolvedAddress[]> {
    const absolute = hostname.endsWith('.');
    const host = hostname
      .toLowerCase()
      .replace(/^\[(.*)\]$/, '$1')
      .replace(/\.$/, '');
    const family = isIP(host);
    if (family) return [{ address: host, family: family as 4 | 6 }];
    const fromFile = this.fromHostsFile(host);
    if (fromFile?.length) return fromFile;
    if (host === 'localhost' || host.endsWith('.localhost')) {
      return [
        { address: '127.0.0.1', family: 4 },
        { address: '::1', family: 6 },
      ];
    }
    if (this.closed) throw new HostLookupError(host, 'ECANCELLED', `lookup of ${host}: the resolver is closed`);
    let timer: NodeJS.Timeout | undefined;
    let end: (() => void) | undefined;
    const timeout = new Promise<never>((_, reject) => {
      end = () => reject(new HostLookupError(host, 'ECANCELLED', `lookup of ${host} cancelled: the resolver closed`));
      this.pending.add(end);
      timer = setTimeout(
        () =>
          reject(
            new HostLookupError(
              host,
              'ETIMEOUT',
              `lookup of ${host} gave no answer within ${this.options.timeoutMs} ms`,
            ),
          ),
        this.options.timeoutMs,
      );
    });
    try {
      return await Promise.race([this.fromDns(host, absolute), timeout]);
    } finally {
      clearTimeout(timer);
      if (end) this.pending.delete(end);
    }
  }

  /**
   * Ends every lookup under way (ECANCELLED) and refuses new ones: at shutdown, a call that is still resolving a
   * name whose DNS never answers must not hold the process up until its deadline.
   */
  close(): void {
    this.closed = true;
    this.resolver.cancel();
    for (const end of this.pending) end();
    this.pending.clear();
  }

  /** The names to ask, in the system resolver's order: with the search domains first when `host` is short. */
  private candidates(host: string, absolute: boolean): string[] {
    const { domains, ndots } = this.searchList();
    if (absolute || !domains.length) return [host];
    const expanded = domains.map((domain) => `${host}.${domain}`);
    return host.split('.').length - 1 >= ndots ? [host, ...expanded] : [...expanded, host];
  }

  private async fromDns(host: string, absolute: boolean): Promise<ResolvedAddress[]> {
    let code = 'ENOTFOUND';
    for (const name of this.candidates(host, absolute)) {
      if (this.closed) break;
      const [v4, v6] = await Promise.allSettled([this.resolver.resolve4(name), this.resolver.resolve6(name)]);
      const addresses: ResolvedAddress[] = [
        ...(v4.status === 'fulfilled' ? v4.value.map((address) => ({ address, family: 4 as const })) : []),
        ...(v6.status === 'fulfilled' ? v6.value.map((address) => ({ address, family: 6 as const })) : []),
      ];
      if (addresses.length) return addresses;
      code = ((v4.status === 'rejected' ? v4.reason : undefined) as { code?: string } | undefined)?.code ?? code;
    }
    throw new HostLookupError(host, code, `lookup of ${host} failed: ${code}`);
  }

  private searchList(): { domains: string[]; ndots: number } {
    let mtimeMs: number;
    try {
      mtimeMs = statSync(this.resolvConf).mtimeMs;
    } catch {
      return { domains: [], ndots: 1 };
    }
    if (this.search?.mtimeMs !== mtimeMs) {
      this.search = { mtimeMs, ...parseResolvConf(readFileSync(this.resolvConf, 'utf8')) };
    }
    return this.search;
  }

  /**
   * The same, in the shape `net.connect`'s `lookup` option takes (undici's `connect.lookup`). `check` may
   * refuse an address (an SSRF rule) before anything connects to it: what it throws is the connect error.
   */
  lookupFunction(check?: (address: ResolvedAddress, hostname: string) => void): LookupFunction {
    return (hostname, options, callback) => {
      this.resolve(hostname).then(
        (all) => {
          const wanted =
            options.family === 4 || options.family === 6 ? all.filter((a) => a.family === options.family) : all;
          try {
            if (!wanted.length) {
              throw new HostLookupError(hostname, 'ENOTFOUND', `${hostname} has no IPv${options.family} address`);
            }
            for (const address of wanted) check?.(address, hostname);
          } catch (error) {
            callback(error as NodeJS.ErrnoException, '', 0);
            return;
          }
          if (options.all) callback(null, wanted);
          else callback(null, wanted[0].address, wanted[0].family);
        },
        (error: NodeJS.ErrnoException) => callback(error, '', 0),
      );
    };
  }

  private fromHostsFile(host: string): ResolvedAddress[] | undefined {
    let mtimeMs: number;
    try {
      mtimeMs = statSync(this.hostsFile).mtimeMs;
    } catch {
      return undefined;
    }
    if (this.hosts?.mtimeMs !== mtimeMs) {
      this.hosts = { mtimeMs, names: parseHostsFile(readFileSync(this.hostsFile, 'utf8')) };
    }
    return this.hosts.names.get(host);
  }
}

export function parseHostsFile(text: string): Map<string, ResolvedAddress[]> {
  const names = new Map<string, ResolvedAddress[]>();
  for (const line of text.split('\n')) {
    const [address, ...aliases] = line.replace(/#.*/, '').trim().split(/\s+/);
    const family = address ? isIP(address.replace(/%.*$/, '')) : 0;
    if (!family) continue;
    for (const alias of aliases) {
      const name = alias.toLowerCase();
      const list = names.get(name) ?? [];
      if (!list.some((a) => a.address === address)) list.push({ address, family: family as 4 | 6 });
      names.set(name, list);
    }
  }
  return names;
}

/**
 * `search` (or `domain`) and `options ndots:N` of a resolv.conf; the last `search` or `domain` line wins, as in
 * glibc.
 */
export function parseResolvConf(text: string): { domains: string[]; ndots: number } {
  let domains: string[] = [];
  let ndots = 1;
  for (const line of text.split('\n')) {
    const [keyword, ...values] = line
      .replace(/[#;].*/, '')
      .trim()
      .split(/\s+/);
    if (keyword === 'search' || keyword === 'domain') {
      domains = values.map((d) => d.toLowerCase().replace(/\.$/, '')).filter(Boolean);
    }
    if (keyword === 'options') {
      for (const option of values) {
        const match = /^ndots:(\d+)$/.exec(option);
        if (match) ndots = Math.min(15, Number(match[1]));
      }
    }
  }
  return { domains, ndots };
}
