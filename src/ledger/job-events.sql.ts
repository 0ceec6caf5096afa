import { dynamic } from '../database/prepared-statements.js';

/**
 * job_events' statement written per transaction (docs/sql/job-events.sql); the hot transitions append their events
 * inside their own statements (jobs.sql.ts, attempts.sql.ts, settlement.sql.ts). The ledger's alone: nothing
 * outside src/ledger/ imports this module (eslint.config.mjs, src/ledger/only-writer.spec.ts).
 */

const CASTS = ['', '', '', '', '', '', '::jsonb', '::uuid', '', '', ''];

/** A transaction's events, one VALUES tuple each (shown for two). */
export const APPEND_EVENTS = dynamic(
  'append_job_events',
  (rows: number) => {
    const tuples = Array.from(
      { length: rows },
      (_, i) => `(${CASTS.map((cast, k) => `$${i * CASTS.length + k + 1}${cast}`).join(', ')})`,
    );
    return `INSERT INTO job_events (job_id, attempt_id, subject, from_status, to_status, reason, detail, actor_key_id,
  actor_owner, actor_subject, actor_issuer) VALUES ${tuples.join(', ')}`;
  },
  2,
);
