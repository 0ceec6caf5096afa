import { spawnSync } from 'node:child_process';

/**
 * QA runs `E2E_BASE_URL=... npm run test:race` against a deployment, on a machine that may have no PostgreSQL:
 * the cases that need a database or processes of their own are skipped, and say why (issue 11 item 12).
 */
describe('the race suite in URL mode', () => {
  it('skips, and names as skipped, the cases that need their own database and processes', () => {
    const result = spawnSync(
      process.execPath,
      [
        'node_modules/jest/bin/jest.js',
        '--maxWorkers=1',
        '--verbose',
        'test/process-faults.e2e-spec.ts',
        'test/race/faults.race-spec.ts',
      ],
      {
        env: {
          PATH: process.env.PATH ?? '',
          NODE_OPTIONS: '--experimental-vm-modules --no-warnings',
          // Nothing listens there: a case that tried to reach it, or a database, would fail.
          E2E_BASE_URL: 'http://127.0.0.1:9',
          E2E_API_KEY: 'oj_unused',
          E2E_OPERATOR_KEY: 'oj_unused',
        },
        encoding: 'utf8',
        timeout: 120_000,
      },
    );
    const output = `${result.stdout}\n${result.stderr}`;
    expect(output).not.toContain('ECONNREFUSED');
    expect(result.status).toBe(0);
    expect(output).toMatch(/skipped in URL mode \(E2E_BASE_URL\): needs a database and processes of its own/);
    expect(output).toMatch(/Tests:\s+\d+ skipped, \d+ total/);
  }, 150_000);
});
