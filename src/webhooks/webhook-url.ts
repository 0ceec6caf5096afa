import { isIP } from 'node:net';

import ipaddr from 'ipaddr.js';

import { ValidationFailedError } from '../common/domain.errors.js';

/**
 * The one address classifier of webhooks (docs/operations.md#webhooks), on ipaddr.js' IANA special-purpose
 * ranges rather than patterns of our own: a webhook may reach only a `unicast` address, never this machine,
 * its network neighbours, the cloud metadata services, private, shared, benchmarking, documentation or reserved
 * space. An IPv6 address that carries an IPv4 one (mapped, SIIT, IPv4-compatible, NAT64, 6to4, Teredo) is
 * judged by the IPv4 address it reaches, so `::ffff:0:7f00:1` or `64:ff9b::a9fe:a9fe` is loopback or metadata.
 * Returns the name of the range that refuses `address`, or undefined when it is public.
 */
export function addressRefusal(address: string): string | undefined {
  let parsed: ipaddr.IPv4 | ipaddr.IPv6;
  try {
    parsed = ipaddr.parse(address);
  } catch {
    return 'not an IP address';
  }
  if (parsed.kind() === 'ipv4') return refusalOfIPv4(parsed as ipaddr.IPv4);
  const v6 = parsed as ipaddr.IPv6;
  const range = v6.range();
  const inner = embeddedIPv4(v6, range);
  if (inner) {
    for (const v4 of inner) {
      const refused = refusalOfIPv4(v4);
      if (refused) return `${refused} (inside ${range})`;
    }
    return undefined;
  }
  return range === 'unicast' ? undefined : range;
}

function refusalOfIPv4(v4: ipaddr.IPv4): string | undefined {
  const range = v4.range();
  return range === 'unicast' ? undefined : range;
}

const fromParts = (high: number, low: number) => new ipaddr.IPv4([high >> 8, high & 0xff, low >> 8, low & 0xff]);

/** The IPv4 addresses an IPv6 address reaches through a transition mechanism, or undefined when none. */
function embeddedIPv4(v6: ipaddr.IPv6, range: string): ipaddr.IPv4[] | undefined {
  const p = v6.parts;
  switch (range) {
    case 'ipv4Mapped': // ::ffff:a.b.c.d
    case 'rfc6145': // ::ffff:0:a.b.c.d (SIIT)
      return [fromParts(p[6], p[7])];
    case 'rfc6052':
      // 64:ff9b::/96 carries the address in its last 32 bits; 64:ff9b:1::/48 is local use, its layout a
      // network's own choice: refused whole (no IPv4 returned, the range name is not unicast).
      return p[2] === 0 && p[3] === 0 && p[4] === 0 && p[5] === 0 ? [fromParts(p[6], p[7])] : undefined;
    case '6to4': // 2002:AABB:CCDD::/48
      return [fromParts(p[1], p[2])];
    case 'teredo': // 2001:0:<server>:<flags>:<port>:<client, bits inverted>
      return [fromParts(p[2], p[3]), fromParts(~p[6] & 0xffff, ~p[7] & 0xffff)];
    case 'unicast':
      // ::a.b.c.d, IPv4-compatible (deprecated, RFC 4291): ipaddr.js has no range for it.
      return p.slice(0, 6).every((x) => x === 0) ? [fromParts(p[6], p[7])] : undefined;
    default:
      return undefined;
  }
}

export function isRefusedAddress(address: string): boolean {
  return addressRefusal(address) !== undefined;
}

/** Every address of a host name (HostLookup.resolve in production: bounded in time, off libuv's pool). */
export type Resolver = (host: string) => Promise<string[]>;

/** The message of a refusal, shared by the creation check and the connect-time check. */
export const REFUSED_ADDRESS_MESSAGE = 'host resolves to a loopback, private, link-local, reserved or metadata address';

const refuse = (message: string) => new ValidationFailedError([{ field: 'url', message }], 422);

/** The address a delivery was about to connect to is refused: thrown from the agent's lookup, nothing connects. */
export class RefusedAddressError extends Error {
  readonly code = 'EREFUSED_ADDRESS';
  constructor(
    readonly address: string,
    readonly range: string,
  ) {
    super(`${REFUSED_ADDRESS_MESSAGE} (${address}: ${range})`);
    this.name = 'RefusedAddressError';
  }
}

/** Throws RefusedAddressError for an address a webhook must not reach: the check of the delivery's lookup. */
export function assertPublicAddress(address: string): void {
  const range = addressRefusal(address);
  if (range) throw new RefusedAddressError(address, range);
}

/**
 * WEBHOOK_ALLOWED_HOSTS entries: `host:port` allows that host on that port only; a bare host allows it on the
 * scheme's default port only (80 for http, 443 for https), so allowing a host never opens its other services.
 * IPv6 literals are bracketed when a port follows (`[::1]:4000`).
 */
export function isAllowedHost(url: URL, allowedHosts: readonly string[]): boolean {
  const host = url.hostname.toLowerCase();
  // url.port is '' for the scheme's default port, whether written or not.
  const port = url.port || (url.protocol === 'https:' ? '443' : '80');
  const bare = host.replace(/^\[(.*)\]$/, '$1');
  return allowedHosts.some((allowed) => allowed === `${host}:${port}` || (!url.port && allowed === bare));
}

/**
 * The checks that need no DNS: an absolute http(s) URL (http only for an allowed host), no credentials, no
 * fragment, and an IP literal host that is public unless allowed. Returns the URL and whether it is allowed.
 */
export function checkWebhookUrlForm(
  raw: string,
  allowedHosts: readonly string[],
): { url: URL; host: string; allowed: boolean } {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw refuse('must be an absolute URL');
  }
  const host = url.hostname.toLowerCase().replace(/^\[(.*)\]$/, '$1');
  const allowed = isAllowedHost(url, allowedHosts);
  if (url.protocol !== 'https:' && !(url.protocol === 'http:' && allowed)) {
    throw refuse('must use https (http only for a host:port in WEBHOOK_ALLOWED_HOSTS)');
  }
  if (url.username || url.password) throw refuse('must not carry credentials');
  if (url.hash) throw refuse('must not have a fragment');
  if (!allowed && isIP(host) && isRefusedAddress(host)) throw refuse(REFUSED_ADDRESS_MESSAGE);
  return { url, host, allowed };
}

/**
 * Checks a webhook URL at creation: its form, then a host whose every address is public. Allowed hosts
 * (WEBHOOK_ALLOWED_HOSTS) skip the address check. Returns the normalised URL. This is not the only check: a
 * name can resolve elsewhere later (DNS rebinding), so every delivery checks the address it connects to.
 */
export async function checkWebhookUrl(
  raw: string,
  allowedHosts: readonly string[],
  resolve: Resolver,
): Promise<string> {
  const { url, host, allowed } = checkWebhookUrlForm(raw, allowedHosts);
  if (allowed || isIP(host)) return url.toString();
  let addresses: string[];
  try {
    addresses = await resolve(host);
  } catch {
    throw refuse('host does not resolve');
  }
  if (!addresses.length) throw refuse('host does not resolve');
  if (addresses.some(isRefusedAddress)) throw refuse(REFUSED_ADDRESS_MESSAGE);
  return url.toString();
}
