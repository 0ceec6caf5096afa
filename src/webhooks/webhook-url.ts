import { lookup } from 'node:dns/promises';
import { BlockList, isIP } from 'node:net';
import { ValidationFailedError } from '../common/domain.errors.js';

/**
 * Where a webhook must never point unless an operator allows the host (docs/operations.md#webhooks): this
 * service's own machine, its network neighbours and the cloud metadata services. Private ranges are refused
 * too: a tenant must not reach an internal service through us.
 */
const REFUSED = new BlockList();
REFUSED.addSubnet('0.0.0.0', 8, 'ipv4'); // "this network"
REFUSED.addSubnet('127.0.0.0', 8, 'ipv4'); // loopback
REFUSED.addSubnet('169.254.0.0', 16, 'ipv4'); // link-local, with 169.254.169.254 (AWS, GCP, Azure metadata)
REFUSED.addSubnet('10.0.0.0', 8, 'ipv4');
REFUSED.addSubnet('172.16.0.0', 12, 'ipv4');
REFUSED.addSubnet('192.168.0.0', 16, 'ipv4');
REFUSED.addSubnet('100.64.0.0', 10, 'ipv4'); // carrier-grade NAT, with 100.100.100.200 (Alibaba metadata)
REFUSED.addSubnet('224.0.0.0', 3, 'ipv4'); // multicast and reserved
REFUSED.addAddress('::', 'ipv6');
REFUSED.addAddress('::1', 'ipv6');
REFUSED.addSubnet('fe80::', 10, 'ipv6'); // link-local
REFUSED.addSubnet('fc00::', 7, 'ipv6'); // unique local, with fd00:ec2::254 (AWS metadata over IPv6)
REFUSED.addSubnet('ff00::', 8, 'ipv6');

/** The IPv4 address inside an IPv4-mapped IPv6 address (::ffff:127.0.0.1), which would otherwise slip through. */
function unmapped(address: string): { address: string; family: 'ipv4' | 'ipv6' } {
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
  if (mapped) return { address: mapped[1], family: 'ipv4' };
  return { address, family: isIP(address) === 6 ? 'ipv6' : 'ipv4' };
}

export function isRefusedAddress(address: string): boolean {
  const { address: plain, family } = unmapped(address);
  return REFUSED.check(plain, family);
}

export type Resolver = (host: string) => Promise<string[]>;

const dnsResolver: Resolver = async (host) => (await lookup(host, { all: true, verbatim: true })).map((a) => a.address);

const refuse = (message: string) => new ValidationFailedError([{ field: 'url', message }], 422);

/**
 * Checks a webhook URL at creation: https (http only for allowed hosts), no credentials, and a host whose every
 * address is public. Allowed hosts (WEBHOOK_ALLOWED_HOSTS) skip the address check. Returns the normalised URL.
 */
export async function checkWebhookUrl(raw: string, allowedHosts: readonly string[], resolve: Resolver = dnsResolver): Promise<string> {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw refuse('must be an absolute URL');
  }
  const host = url.hostname.toLowerCase().replace(/^\[(.*)\]$/, '$1');
  const allowed = allowedHosts.includes(host);
  if (url.protocol !== 'https:' && !(url.protocol === 'http:' && allowed)) throw refuse('must use https (http only for a host in WEBHOOK_ALLOWED_HOSTS)');
  if (url.username || url.password) throw refuse('must not carry credentials');
  if (url.hash) throw refuse('must not have a fragment');
  if (allowed) return url.toString();
  let addresses: string[];
  try {
    addresses = isIP(host) ? [host] : await resolve(host);
  } catch {
    throw refuse('host does not resolve');
  }
  if (!addresses.length) throw refuse('host does not resolve');
  if (addresses.some(isRefusedAddress)) throw refuse('host resolves to a loopback, private, link-local or metadata address');
  return url.toString();
}
