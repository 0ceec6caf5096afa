import { appendFileSync } from 'node:fs';

import pg from 'pg';

import { ATTEMPT_TRANSITIONS, JOB_TRANSITIONS } from '../../src/ledger/state-machine.js';

/** One distinct kind of row of job_events. */
export interface EventKind {
  subject: 'job' | 'attempt';
  from: string | null;
  to: string;
  reason: string;
}

/**
 * The reasons each kind of row of job_events may carry, beside the edge itself (src/ledger/state-machine.ts).
 * Closed lists where every writer is known, the hot statements' literals among them (INSERT_JOB(S): `created`;
 * INSERT_CLAIMED: `claimed`, `attempt_started`; MARK_RUNNING: `provider_called`; SETTLE_RESULTS: `result_won`,
 * `result_discarded`). `OPEN` where the reason is the provider's failure class, which the adapters name
 * (`rate_limited`, `timeout`, `connection_refused`, ...): then any snake_case name but a hot statement's is
 * accepted. A new writer of job_events adds its reasons here, or this check fails every suite that runs
 * it (docs/testing.md#the-state-machine-edge-check).
 */
const OPEN = 'open';
type Reasons = readonly string[] | typeof OPEN;

/** Why a job runs (again): its attempt started, or the next one is due (AttemptScheduler.scheduleAfter's callers). */
const RUNNING = [
  'attempt_started',
  'failover',
  'next_attempt_scheduled',
  'attempt_not_sent',
  'attempt_resolved',
  'provider_unavailable',
];

const JOB_REASONS: Record<string, Reasons> = {
  // from null: the job's first row
  'null>pending': ['created'],
  'pending>running': RUNNING,
  'unknown>running': RUNNING,
  'running>unknown': OPEN,
  'pending>unknown': OPEN,
  'running>pending': ['deferred_paused', 'deferred_breaker_open'],
  'unknown>pending': ['deferred_paused', 'deferred_breaker_open'],
  'pending>succeeded': ['result_won'],
  'running>succeeded': ['result_won'],
  'unknown>succeeded': ['result_won'],
  'pending>failed': ['providers_exhausted', 'provider_unavailable'],
  'running>failed': ['providers_exhausted', 'provider_unavailable'],
  'unknown>failed': ['providers_exhausted', 'provider_unavailable'],
  'pending>cancelled': ['cancelled_by_owner'],
  'running>cancelled': ['cancelled_by_owner'],
  'unknown>cancelled': ['cancelled_by_owner'],
  // Same status: a record, not a move (Ledger.waitForCapacity).
  'pending>pending': ['waiting_for_capacity'],
  'running>running': ['waiting_for_capacity'],
  'unknown>unknown': ['waiting_for_capacity'],
};

/**
 * What the provider said of a request, recorded on its attempt without a move (Ledger.submitted,
 * Ledger.noteProviderStatus: docs/design.md#resolution-at-the-provider).
 */
const PROVIDER_RECORDS = [
  'provider_request_created',
  'provider_status',
  'provider_record_expired',
  'provider_id_never_returned',
];

const ATTEMPT_REASONS: Record<string, Reasons> = {
  // from null: the attempt's first row (a worker's claim, an owner's or operator's request)
  'null>starting': ['claimed', 'requested_by_owner'],
  'starting>running': ['provider_called'],
  'starting>failed': OPEN,
  'running>failed': OPEN,
  'unknown>failed': OPEN,
  'running>unknown': OPEN,
  'running>succeeded': ['result_won', 'result_discarded'],
  'unknown>succeeded': ['result_won', 'result_discarded'],
  'cancelled>succeeded': ['result_won', 'result_discarded'],
  'unknown>cancelled': ['failover', 'resolved_by_operator', 'abandoned_job_finished'],
  // Same status: a record, not a move (a result or a failure that arrived after the attempt ended).
  'failed>failed': ['result_discarded', 'late_failure_ignored', ...PROVIDER_RECORDS],
  'cancelled>cancelled': ['result_discarded', 'late_failure_ignored', ...PROVIDER_RECORDS],
  'succeeded>succeeded': ['result_discarded', 'late_failure_ignored', ...PROVIDER_RECORDS],
  'starting>starting': PROVIDER_RECORDS,
  'running>running': PROVIDER_RECORDS,
  'unknown>unknown': PROVIDER_RECORDS,
};

/** The hot statements' reasons: each belongs to its edges only, never to an open one. */
const HOT = new Set(['created', 'claimed', 'attempt_started', 'provider_called', 'result_won', 'result_discarded']);

/** Why this kind of row is not one the state machine allows; undefined when it is. */
export function edgeViolation(kind: EventKind): string | undefined {
  const { subject, from, to, reason } = kind;
  const transitions: Record<string, readonly string[]> = subject === 'job' ? JOB_TRANSITIONS : ATTEMPT_TRANSITIONS;
  const initial = subject === 'job' ? 'pending' : 'starting';
  if (!(to in transitions)) return `${to} is no ${subject} status`;
  if (from === null ? to !== initial : from !== to && !transitions[from]?.includes(to)) {
    return `${subject} ${from ?? 'null'} -> ${to} is not an edge of src/ledger/state-machine.ts`;
  }
  const reasons = (subject === 'job' ? JOB_REASONS : ATTEMPT_REASONS)[`${from}>${to}`];
  if (reasons === undefined) {
    return `${subject} ${from ?? 'null'} -> ${to} has no reasons in test/helpers/event-edges.ts`;
  }
  if (reasons === OPEN ? !/^[a-z][a-z0-9_]*$/.test(reason) || HOT.has(reason) : !reasons.includes(reason)) {
    return `${subject} ${from ?? 'null'} -> ${to} with reason ${JSON.stringify(reason)}`;
  }
  return undefined;
}

/** The distinct kinds of row in a database's job_events that the state machine does not allow. */
export async function eventEdgeViolations(url: string): Promise<string[]> {
  const client = new pg.Client({ connectionString: url });
  try {
    await client.connect();
  } catch (error) {
    if ((error as { code?: string }).code === '3D000') return []; // dropped already (a second drop)
    throw error;
  }
  try {
    const [{ exists }] = (await client.query(`SELECT to_regclass('job_events') IS NOT NULL AS exists`)).rows;
    if (!exists) return [];
    const { rows } = await client.query<EventKind>(
      `SELECT DISTINCT subject, from_status AS "from", to_status AS "to", reason FROM job_events`,
    );
    if (process.env.EVENT_EDGES_LOG) {
      appendFileSync(process.env.EVENT_EDGES_LOG, rows.map((r) => JSON.stringify(r)).join('\n') + '\n');
    }
    return rows.flatMap((row) => edgeViolation(row) ?? []);
  } finally {
    await client.end();
  }
}
