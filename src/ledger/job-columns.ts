import { LIST_RESULT_MAX_BYTES } from './job.types.js';

/**
 * A job's columns, named, as every statement reading a job row returns them (jobFromRow). The ops' reads keep their
 * own list, without trace_context (src/ops/ops.sql.ts).
 * Its first line stays as it is: CLAIM_DUE's text includes it.
 */
export const JOB_COLUMNS = `j.id, j.owner_id, j.idempotency_key, j.fingerprint, j.operation, j.input, j.providers,
  j.status, j.version,
  j.result, j.error, j.completed_by, j.created_at, j.updated_at, j.completed_at, j.trace_context, j.priority`;

/**
 * JOB_COLUMNS for a list page: a long result stays in the database (PostgreSQL measures it; only the flag
 * travels), so a page of jobs holding large results stays small (issue 22 item 4).
 */
export function listedJobColumns(columns: string): string {
  const size = 'octet_length(j.result::text)';
  const listed = `CASE WHEN ${size} > ${LIST_RESULT_MAX_BYTES} THEN NULL ELSE j.result END AS result,
  COALESCE(${size} > ${LIST_RESULT_MAX_BYTES}, false) AS result_omitted`;
  return columns.replace(/\bj\.result\b/, listed);
}
