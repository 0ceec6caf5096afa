import { redactSecrets, safeErrorFields, sanitizeMessage } from './log-safe.js';

describe('log-safe', () => {
  it.each([
    ['Incorrect API key provided: sk-live-abcdef0123456789XYZ.', 'Incorrect API key provided: [redacted].'],
    ['auth failed for Bearer abc.def-ghi', 'auth failed for Bearer [redacted]'],
    ['sent Bearer oj_abcdefghijklmnop', 'sent Bearer [redacted]'],
    ['{"api_key":"k-123456"}', '{"api_key":"[redacted]"}'],
    ['token deadbeefdeadbeefdeadbeefdeadbeef00 expired', 'token [redacted] expired'],
    ['blob QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo0NTY3ODk= end', 'blob [redacted] end'],
  ])('redacts %s', (text, expected) => {
    expect(redactSecrets(text)).toBe(expected);
  });

  it('keeps short ordinary words and host names', () => {
    expect(redactSecrets('the provider at llm.example.com:8443 answered 401')).toBe(
      'the provider at llm.example.com:8443 answered 401',
    );
  });

  it('keeps quoted identifiers of PostgreSQL messages and drops quoted values', () => {
    expect(sanitizeMessage('new row for relation "jobs" violates check constraint "chk_x"')).toBe(
      'new row for relation "jobs" violates check constraint "chk_x"',
    );
    expect(sanitizeMessage('invalid input syntax for type uuid: "secret input"')).toBe(
      'invalid input syntax for type uuid: "…"',
    );
  });

  it('reads a TypeORM-shaped error without its query or parameters', () => {
    const error = Object.assign(new Error('value "private" is out of range'), {
      query: 'INSERT INTO jobs ...',
      parameters: ['private'],
      driverError: { code: '22003' },
    });
    const fields = safeErrorFields(error, { stack: true });
    expect(fields).toMatchObject({ errorClass: 'Error', code: '22003', error: 'value "…" is out of range' });
    expect(JSON.stringify(fields)).not.toContain('private');
    expect(JSON.stringify(fields)).not.toContain('INSERT');
  });
});
