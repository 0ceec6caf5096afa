import { statement } from '../database/prepared-statements.js';

/** The certification reports' statements (docs/sql/certification.sql). */

export const INSERT_REPORT = statement(
  'insert_certification_report',
  `INSERT INTO certifications (provider, operation, contract_digest, passed, report) VALUES ($1, $2, $3, $4,
        $5::jsonb) RETURNING *`,
);

export const FIND_LATEST = statement(
  'latest_certification',
  `SELECT * FROM certifications WHERE provider = $1 AND operation = $2 AND contract_digest = $3
        ORDER BY created_at DESC LIMIT 1`,
);

export const FIND_LATEST_PER_PAIR = statement(
  'latest_certification_per_pair',
  `SELECT DISTINCT ON (provider, operation) * FROM certifications ORDER BY provider, operation, created_at DESC`,
);

/**
 * The scheduled re-certification's session lock (Recertifier.tick): one replica runs the due runs, the others skip
 * the pass. A session lock, not a transaction's: a run makes provider calls and writes reports as it goes.
 */
export const TRY_LOCK_RECERTIFY = statement<[number], { locked: boolean }>(
  'try_lock_recertify',
  'SELECT pg_try_advisory_lock($1) AS locked',
);

export const UNLOCK_RECERTIFY = statement<[number]>('unlock_recertify', 'SELECT pg_advisory_unlock($1)');
