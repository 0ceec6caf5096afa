import { createSocket, type Socket } from 'node:dgram';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { HostLookup, HostLookupError, parseHostsFile } from './host-lookup.js';

/** A DNS server that reads every query and never answers. */
async function silentDnsServer(): Promise<{ socket: Socket; address: string; queries: () => number }> {
  let queries = 0;
  const socket = createSocket('udp4');
  socket.on('message', () => queries++);
  await new Promise<void>((resolve) => socket.bind(0, '127.0.0.1', resolve));
  return { socket, address: `127.0.0.1:${socket.address().port}`, queries: () => queries };
}

describe('HostLookup', () => {
  let dns: Awaited<ReturnType<typeof silentDnsServer>>;
  let hostsFile: string;

  beforeAll(async () => {
    dns = await silentDnsServer();
    hostsFile = join(mkdtempSync(join(tmpdir(), 'onejob-hosts-')), 'hosts');
    writeFileSync(hostsFile, '127.0.0.1 localhost\n203.0.113.7  receiver.test  alias.test # a comment\n::1 localhost\n');
  });
  afterAll(() => dns.socket.close());

  it('gives up on a name whose DNS server never answers at its deadline, while a hosts-file name answers at once', async () => {
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

  it('answers IP literals without asking anyone, and localhost even without a hosts entry', async () => {
    const lookup = new HostLookup({ timeoutMs: 500, servers: [dns.address], hostsFile: join(tmpdir(), 'no-such-hosts-file') });
    await expect(lookup.resolve('[::1]')).resolves.toEqual([{ address: '::1', family: 6 }]);
    await expect(lookup.resolve('192.0.2.1')).resolves.toEqual([{ address: '192.0.2.1', family: 4 }]);
    await expect(lookup.resolve('localhost')).resolves.toContainEqual({ address: '127.0.0.1', family: 4 });
  });

  it('serves net.connect: one address, all of them, one family, and a refusal from the check', async () => {
    const lookup = new HostLookup({ timeoutMs: 500, servers: [dns.address], hostsFile });
    const call = (host: string, options: object, check?: Parameters<HostLookup['lookupFunction']>[0]) =>
      new Promise<unknown[]>((resolve) => lookup.lookupFunction(check)(host, options, (...args: unknown[]) => resolve(args)));
    await expect(call('alias.test', {})).resolves.toEqual([null, '203.0.113.7', 4]);
    await expect(call('localhost', { all: true })).resolves.toEqual([null, [{ address: '127.0.0.1', family: 4 }, { address: '::1', family: 6 }]]);
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
});
