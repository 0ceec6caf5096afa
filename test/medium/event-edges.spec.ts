import { createJob } from '../factories/index.js';
import { edgeViolation, eventEdgeViolations } from '../helpers/event-edges.js';
import { type MigratedDatabase, migratedDatabase } from './database.js';

/**
 * The state-machine edge check that every test database passes before it is dropped (test/helpers/database.ts):
 * it must refuse what the state machine does not have, or it guards nothing.
 */
describe('the job_events edge check', () => {
  let m: MigratedDatabase;

  beforeAll(async () => {
    m = await migratedDatabase(2);
  });
  afterAll(async () => {
    await m.truncate(); // the bogus rows written here must not fail the drop
    await m.close();
  });

  it("accepts the hot statements' rows on their edges", () => {
    expect(edgeViolation({ subject: 'job', from: null, to: 'pending', reason: 'created' })).toBeUndefined();
    expect(edgeViolation({ subject: 'attempt', from: null, to: 'starting', reason: 'claimed' })).toBeUndefined();
    expect(
      edgeViolation({ subject: 'attempt', from: 'starting', to: 'running', reason: 'provider_called' }),
    ).toBeUndefined();
    expect(
      edgeViolation({ subject: 'attempt', from: 'cancelled', to: 'succeeded', reason: 'result_won' }),
    ).toBeUndefined();
    expect(
      edgeViolation({ subject: 'attempt', from: 'failed', to: 'failed', reason: 'result_discarded' }),
    ).toBeUndefined();
    expect(edgeViolation({ subject: 'attempt', from: 'running', to: 'failed', reason: 'http_503' })).toBeUndefined();
  });

  it('refuses a move the state machine does not have, a bogus reason, and a hot reason on an open edge', () => {
    expect(edgeViolation({ subject: 'attempt', from: 'starting', to: 'unknown', reason: 'timeout' })).toMatch(
      /not an edge/,
    );
    expect(edgeViolation({ subject: 'job', from: 'succeeded', to: 'running', reason: 'attempt_started' })).toMatch(
      /not an edge/,
    );
    expect(edgeViolation({ subject: 'job', from: null, to: 'running', reason: 'created' })).toMatch(/not an edge/);
    expect(edgeViolation({ subject: 'attempt', from: 'starting', to: 'running', reason: 'bogus' })).toMatch(/"bogus"/);
    expect(edgeViolation({ subject: 'job', from: 'running', to: 'succeeded', reason: 'result_discarded' })).toMatch(
      /result_discarded/,
    );
    expect(edgeViolation({ subject: 'attempt', from: 'running', to: 'failed', reason: 'result_won' })).toMatch(
      /result_won/,
    );
    expect(edgeViolation({ subject: 'attempt', from: 'running', to: 'failed', reason: 'Not A Name' })).toBeDefined();
  });

  it('finds the rows of a database that break it', async () => {
    const job = await createJob(m.dataSource);
    expect(await eventEdgeViolations(m.database.url)).toEqual([]);
    await m.dataSource.query(
      `INSERT INTO job_events (job_id, subject, from_status, to_status, reason) VALUES ($1, 'job', 'pending', 'running', 'bogus')`,
      [job.id],
    );
    expect(await eventEdgeViolations(m.database.url)).toEqual(['job pending -> running with reason "bogus"']);
  });
});
