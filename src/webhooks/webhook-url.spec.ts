import { DomainError } from '../common/domain.errors.js';
import { checkWebhookUrl, isRefusedAddress } from './webhook-url.js';

const resolvesTo =
  (...addresses: string[]) =>
  async () =>
    addresses;
const noDns = async (): Promise<string[]> => {
  throw new Error('no DNS expected for an IP literal or an allowed host');
};

describe('checkWebhookUrl', () => {
  it.each([
    '127.0.0.1',
    '127.8.8.8',
    '::1',
    '169.254.169.254',
    '10.1.2.3',
    '172.20.0.1',
    '192.168.1.1',
    '100.100.100.200',
    'fd00:ec2::254',
    'fe80::1',
    '::ffff:127.0.0.1',
    '0.0.0.0',
  ])('refuses %s', (address) => expect(isRefusedAddress(address)).toBe(true));

  // IPv4 inside IPv6 (mapped, embedded/compatible, SIIT, NAT64, 6to4, Teredo) and the reserved IPv4 ranges.
  it.each([
    '::7f00:1',
    '::127.0.0.1',
    '::ffff:7f00:1',
    '::ffff:0:7f00:1',
    '64:ff9b::7f00:1',
    '64:ff9b::a9fe:a9fe',
    '64:ff9b::10.0.0.1',
    '64:ff9b:1::1',
    '2002:7f00:1::',
    '2002:a9fe:a9fe::1',
    '2001:0:4136:e378:8000:63bf:80ff:fffe', // Teredo, client 127.0.0.1 (bits inverted)
    '2001:db8::1',
    '198.18.0.1',
    '198.19.255.255',
    '192.0.0.8',
    '192.0.2.1',
    '240.0.0.1',
    '255.255.255.255',
    'fec0::1',
    '100::1',
    'fe80::1%eth0',
    'not-an-address',
  ])('refuses %s', (address) => expect(isRefusedAddress(address)).toBe(true));

  it.each([
    '93.184.215.14',
    '2606:2800:21f:cb07:6820:80da:af6b:8b2c',
    '8.8.8.8',
    '64:ff9b::808:808',
    '::ffff:8.8.8.8',
    '2002:808:808::1',
  ])('accepts the public address %s', (address) => expect(isRefusedAddress(address)).toBe(false));

  it('accepts https to a public host and refuses plain http to it', async () => {
    await expect(checkWebhookUrl('https://hooks.example.com/in', [], resolvesTo('93.184.215.14'))).resolves.toBe(
      'https://hooks.example.com/in',
    );
    await expect(
      checkWebhookUrl('http://hooks.example.com/in', [], resolvesTo('93.184.215.14')),
    ).rejects.toBeInstanceOf(DomainError);
  });

  it('refuses a host when any of its addresses is internal (one bad A record is enough)', async () => {
    await expect(
      checkWebhookUrl('https://evil.example.com/', [], resolvesTo('93.184.215.14', '169.254.169.254')),
    ).rejects.toMatchObject({ status: 422, code: 'validation_failed' });
  });

  it('refuses IP literals of loopback and metadata, and credentials in the URL', async () => {
    await expect(checkWebhookUrl('https://127.0.0.1/x', [], noDns)).rejects.toBeInstanceOf(DomainError);
    await expect(checkWebhookUrl('https://[::1]/x', [], noDns)).rejects.toBeInstanceOf(DomainError);
    await expect(checkWebhookUrl('https://169.254.169.254/latest/meta-data', [], noDns)).rejects.toBeInstanceOf(
      DomainError,
    );
    // The URL parser's own spellings of 127.0.0.1 and IPv4 inside IPv6 literals.
    for (const url of [
      'https://2130706433/',
      'https://0x7f.1/',
      'https://[::ffff:0:7f00:1]/',
      'https://[64:ff9b::a9fe:a9fe]/',
      'https://[2002:7f00:1::]/',
      'https://198.18.0.1/',
    ]) {
      await expect(checkWebhookUrl(url, [], noDns)).rejects.toMatchObject({ status: 422, code: 'validation_failed' });
    }
    await expect(
      checkWebhookUrl('https://user:pw@hooks.example.com/', [], resolvesTo('93.184.215.14')),
    ).rejects.toBeInstanceOf(DomainError);
  });

  it('lets an allowed host:port use http and a loopback address', async () => {
    await expect(checkWebhookUrl('http://127.0.0.1:4000/hook', ['127.0.0.1:4000'], noDns)).resolves.toBe(
      'http://127.0.0.1:4000/hook',
    );
    await expect(checkWebhookUrl('http://localhost:4000/hook', ['127.0.0.1:4000'], noDns)).rejects.toBeInstanceOf(
      DomainError,
    );
    await expect(checkWebhookUrl('http://[::1]:4000/hook', ['[::1]:4000'], noDns)).resolves.toBe(
      'http://[::1]:4000/hook',
    );
  });

  it('scopes WEBHOOK_ALLOWED_HOSTS by port: host:port allows that port, a bare host its default port', async () => {
    await expect(checkWebhookUrl('http://127.0.0.1:4001/hook', ['127.0.0.1:4000'], noDns)).rejects.toBeInstanceOf(
      DomainError,
    );
    await expect(checkWebhookUrl('http://127.0.0.1:6379/', ['127.0.0.1'], noDns)).rejects.toBeInstanceOf(DomainError);
    await expect(checkWebhookUrl('http://127.0.0.1/hook', ['127.0.0.1'], noDns)).resolves.toBe('http://127.0.0.1/hook');
    await expect(checkWebhookUrl('https://hooks.internal/in', ['hooks.internal'], noDns)).resolves.toBe(
      'https://hooks.internal/in',
    );
    await expect(checkWebhookUrl('https://hooks.internal:8443/in', ['hooks.internal'], noDns)).rejects.toBeInstanceOf(
      DomainError,
    );
    await expect(checkWebhookUrl('https://hooks.internal:8443/in', ['hooks.internal:8443'], noDns)).resolves.toBe(
      'https://hooks.internal:8443/in',
    );
  });

  it('refuses a host that does not resolve', async () => {
    const fails = async () => {
      throw new Error('ENOTFOUND');
    };
    await expect(checkWebhookUrl('https://nowhere.invalid/', [], fails)).rejects.toMatchObject({
      errors: [{ field: 'url', message: 'host does not resolve' }],
    });
  });
});
