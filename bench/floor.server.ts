/**
 * The floor of the create and get cases: the least an HTTP server on this stack does per request. Fastify and pg,
 * the service's own statement (`INSERT_JOB`, one transaction per create; `FIND_OWNED_BY_ID`), named as the service
 * names it, on a pool of the service's size, and nothing else: no API key, no idempotency mapping, no validation
 * beyond a JSON schema, no logs, no metrics. It is not a service anybody could run; it measures how much of the
 * service's distance to PostgreSQL alone is the transport (HTTP parsing, the driver, two socket writes per request
 * on loopback) rather than the service's own work.
 *
 *   DATABASE_URL=... PORT=... DB_POOL_SIZE=20 FLOOR_OWNER=<owner of the jobs to get> node dist/bench/floor.server.js
 */
import Fastify from 'fastify';
import pg from 'pg';

import { statementName } from '../src/database/prepared-statements.js';
import { FIND_OWNED_BY_ID, INSERT_JOB } from '../src/ledger/jobs.sql.js';

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: Number(process.env.DB_POOL_SIZE ?? 20) });
const named = process.env.DB_PREPARED_STATEMENTS !== 'false';
const app = Fastify({ logger: false });
const schema = {
  body: {
    type: 'object',
    required: ['operation', 'input'],
    properties: {
      operation: { type: 'string' },
      input: { type: 'object' },
      providers: { type: 'array', items: { type: 'string' } },
    },
  },
};

app.post<{ Body: { operation: string; input: object } }>('/v1/jobs', { schema }, async (request, reply) => {
  const key = request.headers['idempotency-key'];
  const values = [
    'bench-floor',
    key,
    'f'.repeat(64),
    request.body.operation,
    JSON.stringify(request.body.input),
    ['bench-zero'],
    null,
    null,
  ];
  const { rows } = await pool.query({
    name: named ? statementName(INSERT_JOB.text) : undefined,
    text: INSERT_JOB.text,
    values,
  });
  void reply.code(201).header('Location', `/v1/jobs/${rows[0].id}`);
  return rows[0];
});
app.get<{ Params: { id: string } }>('/v1/jobs/:id', async (request) => {
  const values = [request.params.id, process.env.FLOOR_OWNER];
  const { rows } = await pool.query({
    name: named ? statementName(FIND_OWNED_BY_ID.text) : undefined,
    text: FIND_OWNED_BY_ID.text,
    values,
  });
  return rows[0];
});
app.get('/health/ready', async () => ({ status: 'ok' }));

await app.listen({ port: Number(process.env.PORT), host: '127.0.0.1' });
process.on(
  'SIGTERM',
  () =>
    void app
      .close()
      .then(() => pool.end())
      .then(() => process.exit(0)),
);
