import { createSocket, type Socket } from 'node:dgram';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { HostLookup, HostLookupError, parseHostsFile, parseResolvConf } from './host-lookup.js';

/** A DNS server that reads every query and never answers. */
async function silentDnsServer(): Promise<{ socket: Socket; address: string; queries: () => number }> {
  let queries = 0;
  const socket = createSocket('udp4');
  socket.on('message', () => queries++);
  await new Promise<void>((resolve) => socket.bind(0, '127.0.0.1', resolve));
  return { socket, address: `127.0.0.1:${socket.address().port}`, queries: () => queries };
}

/**
 * A DNS server that knows a few names (A records only) and answers NXDOMAIN for the rest: enough of RFC 1035 to
 * see which names a resolver asks for, in which order.
 */
async function tinyDnsServer(
  names: Record<string, string>,
): Promise<{ socket: Socket; address: string; asked: string[] }> {
  const asked: string[] = [];
  const socket = createSocket('udp4');
  socket.on('message', (query, peer) => {
    const labels: string[] = [];
    let at = 12;
    while (query[at] !== 0) {
      labels.push(query.subarray(at + 1, at + 1 + query[at]).toString());
      at += query[at] + 1;
    }
    const question = query.subarray(12, at + 5);
    const name = labels.join('.').toLowerCase();
    const type = query.readUInt16BE(at + 1);
    asked.push(`${name}/${type === 1 ? 'A' : type === 28 ? 'AAAA' : type}`);
    const address = names[name];
    const header = Buffer.alloc(12);
    query.copy(header, 0, 0, 2); // the id
    header.writeUInt16BE(address === undefined ? 0x8183 : 0x8180, 2); // a response; NXDOMAIN or NOERROR
    header.writeUInt16BE(1, 4); // one question
    const answer = address !== undefined && type === 1;
    header.writeUInt16BE(answer ? 1 : 0, 6);
    const record = answer
      ? Buffer.concat([
          Buffer.from([0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4]),
          Buffer.from(address.split('.').map(Number)),
        ])
      : Buffer.alloc(0);
    socket.send(Buffer.concat([header, question, record]), peer.port, peer.address);
  });
  await new Promise<void>((resolve) => socket.bind(0, '127.0.0.1', resolve));
  return { socket, address: `127.0.0.1:${socket.address().port}`, asked };
}

describe('HostLookup', () => {
  let dns: Awaited<ReturnType<typeof silentDnsServer>>;
  let hostsFile: string;

  beforeAll(async () => {
    dns = await silentDnsServer();
    hostsFile = join(mkdtempSync(join(tmpdir(), 'onejob-hosts-')), 'hosts');
    writeFileSync(
      hostsFile,
      '127.0.0.1 localhost\n203.0.113.7  receiver.test  alias.test # a comment\n::1 localhost\n',
    );
  });
  afterAll(() => dns.socket.close());

  it('gives up on a name whose DNS server is silent, at its deadline; a hosts-file name answers at once', async () => {
    const lookup = new HostLookup({ timeoutMs: 500, servers: [dns.address], hostsFile });
    const started = Date.now();
    // Eight hanging names at once: on libuv's pool (dns.lookup) they would hold all four threads.
    const hanging = Array.from({ length: 8 }, (_, i) => lookup.resolve(`hangs-${i}.test`).catch((e: unknown) => e));
    await expect(lookup.resolve('receiver.test')).resolves.toEqual([{ address: '203.0.113.7', family: 4 }]);
    expect(Date.now() - started).toBeLessThan(200);
    const errors = await Promise.all(hanging);
    const elapsed = Date.now() - started;
    for (const error of errors) {
      expect(error).toBeInstanceOf(HostLookupError);
      expect((error as HostLookupError).code).toBe('ETIMEOUT');
    }
    expect(elapsed).toBeGreaterThanOrEqual(450);
    expect(elapsed).toBeLessThan(2_000);
    expect(dns.queries()).toBeGreaterThanOrEqual(8);
  });

  it('ends the lookups under way at close, at once, and refuses new ones: nothing waits for the deadline', async () => {
    const lookup = new HostLookup({ timeoutMs: 10_000, servers: [dns.address], hostsFile, resolvConf: '/nonexistent' });
    const started = Date.now();
    const hanging = lookup.resolve('hangs-at-close.test').catch((e: unknown) => e);
    await new Promise((resolve) => setTimeout(resolve, 50));
    lookup.close();
    const error = (await hanging) as HostLookupError;
    expect({ name: error.name, code: error.code, hostname: error.hostname }).toEqual({
      name: 'HostLookupError',
      code: 'ECANCELLED',
      hostname: 'hangs-at-close.test',
    });
    expect(Date.now() - started).toBeLessThan(1_000);
    await expect(lookup.resolve('other.test')).rejects.toMatchObject({ code: 'ECANCELLED' });
    // The hosts file and IP literals need no resolver: they still answer.
    await expect(lookup.resolve('receiver.test')).resolves.toEqual([{ address: '203.0.113.7', family: 4 }]);
  });

  it('answers IP literals without asking anyone, and localhost even without a hosts entry', async () => {
    const lookup = new HostLookup({
      timeoutMs: 500,
      servers: [dns.address],
      hostsFile: join(tmpdir(), 'no-such-hosts-file'),
    });
    await expect(lookup.resolve('[::1]')).resolves.toEqual([{ address: '::1', family: 6 }]);
    await expect(lookup.resolve('192.0.2.1')).resolves.toEqual([{ address: '192.0.2.1', family: 4 }]);
    await expect(lookup.resolve('localhost')).resolves.toContainEqual({ address: '127.0.0.1', family: 4 });
  });

  it('serves net.connect: one address, all of them, one family, and a refusal from the check', async () => {
    const lookup = new HostLookup({ timeoutMs: 500, servers: [dns.address], hostsFile });
    const call = (host: string, options: object, check?: Parameters<HostLookup['lookupFunction']>[0]) =>
      new Promise<unknown[]>((resolve) =>
        lookup.lookupFunction(check)(host, options, (...args: unknown[]) => resolve(args)),
      );
    await expect(call('alias.test', {})).resolves.toEqual([null, '203.0.113.7', 4]);
    await expect(call('localhost', { all: true })).resolves.toEqual([
      null,
      [
        { address: '127.0.0.1', family: 4 },
        { address: '::1', family: 6 },
      ],
    ]);
    await expect(call('localhost', { family: 6 })).resolves.toEqual([null, '::1', 6]);
    const refused = await call('localhost', {}, (a) => {
      throw Object.assign(new Error(`refused ${a.address}`), { code: 'EREFUSED_ADDRESS' });
    });
    expect((refused[0] as Error).message).toBe('refused 127.0.0.1');
  });

  it('reads a hosts file: comments, aliases, both families', () => {
    const names = parseHostsFile('# x\n10.0.0.1 a b\n\nfe80::1%eth0 c\n::1 a\n');
    expect(names.get('a')).toEqual([
      { address: '10.0.0.1', family: 4 },
      { address: '::1', family: 6 },
    ]);
    expect(names.get('b')).toEqual([{ address: '10.0.0.1', family: 4 }]);
    expect(names.get('c')?.[0].family).toBe(6);
  });

  it("applies resolv.conf's search domains to a short name, not to an absolute one, as glibc does", async () => {
    const server = await tinyDnsServer({
      'vllm.models.svc.cluster.local': '198.51.100.20',
      'api.example.com': '198.51.100.30',
    });
    try {
      const resolvConf = join(mkdtempSync(join(tmpdir(), 'onejob-resolv-')), 'resolv.conf');
      writeFileSync(
        resolvConf,
        'nameserver 10.0.0.10\nsearch models.svc.cluster.local svc.cluster.local\noptions ndots:2\n',
      );
      const lookup = new HostLookup({ timeoutMs: 2_000, servers: [server.address], hostsFile, resolvConf });
      await expect(lookup.resolve('vllm')).resolves.toEqual([{ address: '198.51.100.20', family: 4 }]);
      // Two dots reach ndots: the name as given is asked first.
      server.asked.length = 0;
      await expect(lookup.resolve('api.example.com')).resolves.toEqual([{ address: '198.51.100.30', family: 4 }]);
      expect(server.asked[0]).toMatch(/^api\.example\.com\//);
      await expect(lookup.resolve('vllm.')).rejects.toMatchObject({ code: 'ENOTFOUND' });
    } finally {
      server.socket.close();
    }
  });

  it('reads search domains and ndots from a resolv.conf', () => {
    expect(parseResolvConf('domain a.example\nsearch b.example c.example. # x\noptions ndots:5 timeout:2\n')).toEqual({
      domains: ['b.example', 'c.example'],
      ndots: 5,
    });
    expect(parseResolvConf('nameserver 1.1.1.1\n')).toEqual({ domains: [], ndots: 1 });
  });
});
