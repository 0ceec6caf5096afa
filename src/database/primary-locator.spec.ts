import { sessionAcceptable } from './primary-locator.js';

describe('target_session_attrs (docs/operations.md#failover)', () => {
  it('judges a session as libpq does from what the server reported at log-in, and asks when it did not say', () => {
    const primary = { in_hot_standby: 'off', default_transaction_read_only: 'off' };
    const demoted = { in_hot_standby: 'off', default_transaction_read_only: 'on' };
    const standby = { in_hot_standby: 'on', default_transaction_read_only: 'off' };
    expect(['read-write', 'primary', 'any'].map((a) => sessionAcceptable(a as never, primary))).toEqual([
      true,
      true,
      true,
    ]);
    expect(['read-write', 'primary', 'any'].map((a) => sessionAcceptable(a as never, demoted))).toEqual([
      false,
      true,
      true,
    ]);
    expect(['read-write', 'primary', 'any'].map((a) => sessionAcceptable(a as never, standby))).toEqual([
      false,
      false,
      true,
    ]);
    expect(sessionAcceptable('read-write', {})).toBeUndefined();
  });
});
