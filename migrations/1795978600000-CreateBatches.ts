import type { MigrationInterface, QueryRunner } from 'typeorm';

const LIVE = `('pending', 'running', 'unknown')`;
const TERMINAL = `('succeeded', 'failed', 'cancelled')`;
const JOB_EVENTS = `ARRAY['job.succeeded', 'job.failed', 'job.cancelled', 'attempt.unknown']`;

/**
 * Batches (docs/design.md#batches): a batch row bound to its own owner and key (I1, I2 at the batch level), and
 * its items in their own table, so one job can belong to several batches. `live_jobs` counts the member jobs not
 * yet terminal; a statement trigger on jobs takes it down in the transaction that makes a member terminal, and the
 * decrement that reaches zero writes `batch.completed` to the outbox: exactly once, since jobs never come back
 * from a terminal status. The payload has one builder, `batch_announcement`, which the create path calls too.
 */
export class CreateBatches1795978600000 implements MigrationInterface {
  name = 'CreateBatches1795978600000';

  async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`
      CREATE TABLE batches (
        id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
        owner_id text NOT NULL,
        idempotency_key character varying(255) NOT NULL,
        fingerprint character(64) NOT NULL,
        metadata jsonb,
        priority integer NOT NULL DEFAULT 0,
        item_count integer NOT NULL,
        live_jobs integer NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now(),
        completed_at timestamptz,
        CONSTRAINT "UQ_batches_owner_idempotency_key" UNIQUE (owner_id, idempotency_key),
        CONSTRAINT "CHK_batches_priority" CHECK (priority BETWEEN -1000 AND 1000),
        CONSTRAINT "CHK_batches_item_count" CHECK (item_count BETWEEN 1 AND 10000),
        CONSTRAINT "CHK_batches_live_jobs" CHECK (live_jobs >= 0),
        CONSTRAINT "CHK_batches_completed_at" CHECK (completed_at IS NULL OR live_jobs = 0)
      )`);
    await queryRunner.query(`CREATE INDEX "IDX_batches_owner_created" ON batches (owner_id, created_at DESC, id DESC)`);
    // No foreign keys on the items: the batch row and the jobs are written by the same transaction, and a check
    // per item row would cost a 10,000-item write 20,000 trigger calls. A conflict item names no job; a job the
    // retention purge took leaves its item's id behind, and the reads join jobs, so it simply stops counting.
    await queryRunner.query(`
      CREATE TABLE batch_items (
        batch_id uuid NOT NULL,
        ord integer NOT NULL,
        idempotency_key character varying(255) NOT NULL,
        job_id uuid,
        outcome text NOT NULL,
        CONSTRAINT "PK_batch_items" PRIMARY KEY (batch_id, ord),
        CONSTRAINT "CHK_batch_items_outcome" CHECK (outcome IN ('created', 'replayed', 'conflict'))
      )`);
    await queryRunner.query(`CREATE INDEX "IDX_batch_items_job" ON batch_items (job_id) WHERE job_id IS NOT NULL`);

    await queryRunner.query(`ALTER TABLE webhook_deliveries
      ALTER COLUMN job_id DROP NOT NULL, ADD COLUMN batch_id uuid`);
    await queryRunner.query(`ALTER TABLE webhook_deliveries ADD CONSTRAINT "CHK_webhook_deliveries_subject"
      CHECK ((job_id IS NULL) <> (batch_id IS NULL))`);
    await queryRunner.query(`CREATE INDEX "IDX_webhook_deliveries_batch" ON webhook_deliveries (batch_id)
      WHERE batch_id IS NOT NULL`);
    await queryRunner.query(`ALTER TABLE webhook_endpoints DROP CONSTRAINT "CHK_webhook_endpoints_events"`);
    await queryRunner.query(`ALTER TABLE webhook_endpoints ADD CONSTRAINT "CHK_webhook_endpoints_events"
      CHECK (cardinality(events) >= 1 AND events <@ (${JOB_EVENTS} || ARRAY['batch.completed'])::text[])`);

    // The one builder of the batch.completed body: times as the REST API writes them, counts per job status.
    await queryRunner.query(`
      CREATE FUNCTION batch_announcement(b batches) RETURNS jsonb LANGUAGE sql STABLE AS $$
        SELECT jsonb_build_object('type', 'batch.completed',
          'timestamp', to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
          'data', jsonb_build_object('batchId', b.id, 'idempotencyKey', b.idempotency_key, 'items', b.item_count,
            'counts', (SELECT jsonb_build_object(
                 'succeeded', count(*) FILTER (WHERE j.status = 'succeeded'),
                 'failed', count(*) FILTER (WHERE j.status = 'failed'),
                 'cancelled', count(*) FILTER (WHERE j.status = 'cancelled'),
                 'conflict', (SELECT count(*) FROM batch_items c WHERE c.batch_id = b.id AND c.outcome = 'conflict'))
               FROM batch_items i JOIN jobs j ON j.id = i.job_id WHERE i.batch_id = b.id),
            'completedAt', to_char(b.completed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')))
      $$`);
    // One delivery per enabled endpoint of the owner subscribed to batch.completed; returns how many.
    await queryRunner.query(`
      CREATE FUNCTION announce_batch_completed(batch_id uuid) RETURNS integer LANGUAGE sql AS $$
        WITH d AS (
          INSERT INTO webhook_deliveries (endpoint_id, owner_id, batch_id, event_type, payload)
          SELECT w.id, b.owner_id, b.id, 'batch.completed', batch_announcement(b)
            FROM batches b JOIN webhook_endpoints w ON w.owner_id = b.owner_id AND w.status = 'enabled'
                                                 AND 'batch.completed' = ANY (w.events)
           WHERE b.id = announce_batch_completed.batch_id
          RETURNING 1
        )
        SELECT count(*)::int FROM d
      $$`);
    // Every UPDATE statement on jobs: the members that went from live to terminal take their batches' counts
    // down. Batches are locked in id order after the jobs the statement locked, so two statements never deadlock
    // on them; the UPDATE after the lock sees every count committed before it.
    await queryRunner.query(`
      CREATE FUNCTION batches_on_jobs_settled() RETURNS trigger LANGUAGE plpgsql AS $$
      DECLARE
        hit uuid[];
        done_batch uuid;
        part integer;
      BEGIN
        SELECT array_agg(DISTINCT i.batch_id ORDER BY i.batch_id) INTO hit
          FROM settled_new n JOIN settled_old o ON o.id = n.id JOIN batch_items i ON i.job_id = n.id
         WHERE o.status IN ${LIVE} AND n.status IN ${TERMINAL};
        IF hit IS NULL THEN
          RETURN NULL;
        END IF;
        PERFORM 1 FROM batches WHERE id = ANY (hit) ORDER BY id FOR UPDATE;
        FOR done_batch IN
          WITH gone AS (
            SELECT i.batch_id, count(*)::int AS n
              FROM settled_new n JOIN settled_old o ON o.id = n.id JOIN batch_items i ON i.job_id = n.id
             WHERE o.status IN ${LIVE} AND n.status IN ${TERMINAL}
             GROUP BY i.batch_id
          )
          UPDATE batches b SET live_jobs = b.live_jobs - gone.n,
                 completed_at = CASE WHEN b.live_jobs - gone.n = 0 THEN now() END
            FROM gone WHERE b.id = gone.batch_id AND b.completed_at IS NULL
          RETURNING CASE WHEN b.live_jobs = 0 THEN b.id END
        LOOP
          IF done_batch IS NOT NULL THEN
            PERFORM announce_batch_completed(done_batch);
          END IF;
        END LOOP;
        -- The batches' live streams (GET /v1/batches/:id/events) hear of it at commit, on every replica; 200 ids a
        -- NOTIFY, as JobSignals sends them (a payload is limited to 8,000 bytes).
        FOR part IN 0 .. (cardinality(hit) - 1) / 200 LOOP
          PERFORM pg_notify('onejob_events', array_to_string(hit[part * 200 + 1 : (part + 1) * 200], ','));
        END LOOP;
        RETURN NULL;
      END $$`);
    await queryRunner.query(`
      CREATE TRIGGER "TRG_jobs_settle_batches" AFTER UPDATE ON jobs
        REFERENCING OLD TABLE AS settled_old NEW TABLE AS settled_new
        FOR EACH STATEMENT EXECUTE FUNCTION batches_on_jobs_settled()`);
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`DROP TRIGGER "TRG_jobs_settle_batches" ON jobs`);
    await queryRunner.query(`DROP FUNCTION batches_on_jobs_settled()`);
    await queryRunner.query(`DROP FUNCTION announce_batch_completed(uuid)`);
    await queryRunner.query(`DROP FUNCTION batch_announcement(batches)`);
    await queryRunner.query(`DELETE FROM webhook_deliveries WHERE batch_id IS NOT NULL`);
    await queryRunner.query(`ALTER TABLE webhook_deliveries DROP CONSTRAINT "CHK_webhook_deliveries_subject"`);
    await queryRunner.query(`ALTER TABLE webhook_deliveries DROP COLUMN batch_id, ALTER COLUMN job_id SET NOT NULL`);
    await queryRunner.query(`UPDATE webhook_endpoints SET events = array_remove(events, 'batch.completed')`);
    await queryRunner.query(`DELETE FROM webhook_endpoints WHERE cardinality(events) = 0`);
    await queryRunner.query(`ALTER TABLE webhook_endpoints DROP CONSTRAINT "CHK_webhook_endpoints_events"`);
    await queryRunner.query(`ALTER TABLE webhook_endpoints ADD CONSTRAINT "CHK_webhook_endpoints_events"
      CHECK (cardinality(events) >= 1 AND events <@ ${JOB_EVENTS}::text[])`);
    await queryRunner.query(`DROP TABLE batch_items`);
    await queryRunner.query(`DROP TABLE batches`);
  }
}
