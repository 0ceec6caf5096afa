import { DomainError } from '../common/domain.errors.js';
import { checkWebhookUrl, isRefusedAddress } from './webhook-url.js';

const resolvesTo = (...addresses: string[]) => async () => addresses;

describe('checkWebhookUrl', () => {
  it.each(['127.0.0.1', '127.8.8.8', '::1', '169.254.169.254', '10.1.2.3', '172.20.0.1', '192.168.1.1', '100.100.100.200', 'fd00:ec2::254', 'fe80::1', '::ffff:127.0.0.1', '0.0.0.0'])(
    'refuses %s',
    (address) => expect(isRefusedAddress(address)).toBe(true),
  );

  it.each(['93.184.215.14', '2606:2800:21f:cb07:6820:80da:af6b:8b2c', '8.8.8.8'])('accepts the public address %s', (address) => expect(isRefusedAddress(address)).toBe(false));

  it('accepts https to a public host and refuses plain http to it', async () => {
    await expect(checkWebhookUrl('https://hooks.example.com/in', [], resolvesTo('93.184.215.14'))).resolves.toBe('https://hooks.example.com/in');
    await expect(checkWebhookUrl('http://hooks.example.com/in', [], resolvesTo('93.184.215.14'))).rejects.toBeInstanceOf(DomainError);
  });

  it('refuses a host when any of its addresses is internal (one bad A record is enough)', async () => {
    await expect(checkWebhookUrl('https://evil.example.com/', [], resolvesTo('93.184.215.14', '169.254.169.254'))).rejects.toMatchObject({ status: 422, code: 'validation_failed' });
  });

  it('refuses IP literals of loopback and metadata, and credentials in the URL', async () => {
    await expect(checkWebhookUrl('https://127.0.0.1/x', [])).rejects.toBeInstanceOf(DomainError);
    await expect(checkWebhookUrl('https://[::1]/x', [])).rejects.toBeInstanceOf(DomainError);
    await expect(checkWebhookUrl('https://169.254.169.254/latest/meta-data', [])).rejects.toBeInstanceOf(DomainError);
    await expect(checkWebhookUrl('https://user:pw@hooks.example.com/', [], resolvesTo('93.184.215.14'))).rejects.toBeInstanceOf(DomainError);
  });

  it('lets an allowed host use http and a loopback address', async () => {
    await expect(checkWebhookUrl('http://127.0.0.1:4000/hook', ['127.0.0.1'])).resolves.toBe('http://127.0.0.1:4000/hook');
    await expect(checkWebhookUrl('http://localhost:4000/hook', ['127.0.0.1'])).rejects.toBeInstanceOf(DomainError);
  });

  it('refuses a host that does not resolve', async () => {
    const fails = async () => {
      throw new Error('ENOTFOUND');
    };
    await expect(checkWebhookUrl('https://nowhere.invalid/', [], fails)).rejects.toMatchObject({ errors: [{ field: 'url', message: 'host does not resolve' }] });
  });
});
