import { dynamic } from '../database/prepared-statements.js';

/** The wake-ups' statement (docs/sql/job-signals.sql). */

/** One flush of JobSignals: `count` NOTIFYs in one round trip, each a (channel, payload) pair of parameters. */
export const NOTIFY_SIGNALS = dynamic(
  'notify_job_signals',
  (count: number) =>
    `SELECT ${Array.from({ length: count }, (_, i) => `pg_notify($${2 * i + 1}, $${2 * i + 2})`).join(', ')}`,
  2,
);
