import type { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * The owners with work, in pass order (docs/design.md#fair-share, the owner queue): a claim reads the few owners
 * with the smallest pass from `IDX_owner_queue_pass` instead of visiting every owner with due work.
 *
 * A row (queue, owner) says the owner may have work in that queue (`''` for jobs free to run, a provider's name for
 * jobs waiting on it). A `now` row (`later` false) is written when a job becomes due now; a `later` row keeps the
 * earliest time one of its jobs becomes due (a retry's back-off, a deferral). The rows may say more than there is
 * (a claim then finds nothing and the owner is tidied away), never less: every job with a `next_attempt_at` has a
 * row of its queue and owner due no later than it.
 *
 * The triggers keep the second half. They fire only on a row that becomes schedulable, is scheduled earlier, or moves
 * to another queue (the claim's running mark and a settlement clear `next_attempt_at` and fire nothing). Each finds
 * the row that covers its job and holds it with FOR KEY SHARE until its transaction ends, or inserts it (and so holds
 * it); a row already there costs a create one probe and a share lock, so one owner's creates never queue on its row,
 * and a claim's FOR NO KEY UPDATE and its charge's pass never wait for them. A row lock lives in the row, not in
 * PostgreSQL's shared lock table: one statement may make 100,000 owners due.
 *
 * `onejob_tidy_owner_queue` removes what a claim found empty, after that claim committed: per row, FOR UPDATE SKIP
 * LOCKED (a row a create holds, or a claim, is left for a later claim, never waited for), then, in a statement of its
 * own whose snapshot therefore holds every job whose create held the row before, the owner's jobs recounted. A create
 * that comes after waits for the tidy's lock, finds the row gone, and inserts it again.
 */
export class CreateOwnerQueue1795979600000 implements MigrationInterface {
  name = 'CreateOwnerQueue1795979600000';

  async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`
      CREATE TABLE owner_queue (
        queue text NOT NULL,
        owner_id text NOT NULL,
        later boolean NOT NULL,
        due_at timestamptz NOT NULL,
        pass float8 NOT NULL DEFAULT 0,
        CONSTRAINT "PK_owner_queue" PRIMARY KEY (owner_id, queue, later)
      )`);
    // The key leads with the owner: the claim's read by queue has one index to take, in pass order. Until autovacuum
    // first analyzes the table (50 changes on), the planner may guess it small and sort every queued owner instead
    // (30 ms at 30,000 owners, against 4 ms once analyzed).
    await queryRunner.query(
      `CREATE INDEX "IDX_owner_queue_pass" ON owner_queue (queue, pass, owner_id) WHERE NOT later`,
    );
    // The later rows apart, by due time: a claim reads those fallen due first, never walks past the owners whose
    // retries are still backing off (a provider's outage leaves one per owner).
    await queryRunner.query(`CREATE INDEX "IDX_owner_queue_later" ON owner_queue (queue, due_at) WHERE later`);
    await queryRunner.query(`
      CREATE FUNCTION onejob_queue_owner() RETURNS trigger LANGUAGE plpgsql AS $$
      DECLARE
        q text := COALESCE(NEW.waiting_for, '');
        l boolean := NEW.next_attempt_at > now();
        due timestamptz := CASE WHEN NEW.next_attempt_at > now() THEN NEW.next_attempt_at ELSE '-infinity' END;
        held timestamptz;
      BEGIN
        LOOP
          SELECT due_at INTO held FROM owner_queue WHERE queue = q AND owner_id = NEW.owner_id AND later = l
             FOR KEY SHARE;
          IF FOUND THEN
            -- Held: no tidy moves it until this transaction ends. Only a later row due after this job needs a write
            -- (LEAST: of the row as another create may have left it, once this one waited for it).
            IF held > due THEN
              UPDATE owner_queue SET due_at = LEAST(due_at, due) WHERE queue = q AND owner_id = NEW.owner_id AND later = l;
            END IF;
            RETURN NULL;
          END IF;
          INSERT INTO owner_queue (queue, owner_id, later, due_at, pass)
          VALUES (q, NEW.owner_id, l, due, COALESCE((SELECT pass FROM owner_shares WHERE owner_id = NEW.owner_id), 0))
          ON CONFLICT DO NOTHING;
          -- Inserted, and so held; or another transaction's insert committed meanwhile: hold that one.
          IF FOUND THEN
            RETURN NULL;
          END IF;
        END LOOP;
      END $$`);
    await queryRunner.query(`
      CREATE TRIGGER "TRG_jobs_queue_insert" AFTER INSERT ON jobs
        FOR EACH ROW WHEN (NEW.next_attempt_at IS NOT NULL) EXECUTE FUNCTION onejob_queue_owner()`);
    await queryRunner.query(`
      CREATE TRIGGER "TRG_jobs_queue_update" AFTER UPDATE OF next_attempt_at, waiting_for ON jobs
        FOR EACH ROW WHEN (NEW.next_attempt_at IS NOT NULL AND (OLD.next_attempt_at IS NULL
          OR NEW.next_attempt_at < OLD.next_attempt_at OR NEW.waiting_for IS DISTINCT FROM OLD.waiting_for))
        EXECUTE FUNCTION onejob_queue_owner()`);
    await queryRunner.query(`
      CREATE FUNCTION onejob_tidy_owner_queue(queues text[], owners text[]) RETURNS integer LANGUAGE plpgsql AS $$
      DECLARE
        q text;
        o text;
        due boolean;
        next timestamptz;
        first timestamptz;
        now_held boolean;
        later_held boolean;
        later_free boolean;
        tidied integer := 0;
      BEGIN
        FOR q, o IN SELECT * FROM unnest(queues, owners) LOOP
          -- The rows first, each skipped if a create or a claim holds it; then the jobs, in statements of their own.
          PERFORM 1 FROM owner_queue WHERE queue = q AND owner_id = o AND NOT later FOR UPDATE SKIP LOCKED;
          now_held := FOUND;
          PERFORM 1 FROM owner_queue WHERE queue = q AND owner_id = o AND later FOR UPDATE SKIP LOCKED;
          later_held := FOUND;
          later_free := NOT later_held
            AND NOT EXISTS (SELECT 1 FROM owner_queue WHERE queue = q AND owner_id = o AND later);
          CONTINUE WHEN NOT now_held AND NOT later_held AND NOT later_free;
          -- Two statements, one per partial index (IDX_jobs_due_owner, IDX_jobs_waiting_owner).
          IF q = '' THEN
            SELECT bool_or(next_attempt_at <= now()), min(next_attempt_at) FILTER (WHERE next_attempt_at > now()),
                   min(next_attempt_at)
              INTO due, next, first FROM jobs
             WHERE owner_id = o AND waiting_for IS NULL AND next_attempt_at IS NOT NULL
               AND status IN ('pending', 'running', 'unknown');
          ELSE
            SELECT bool_or(next_attempt_at <= now()), min(next_attempt_at) FILTER (WHERE next_attempt_at > now()),
                   min(next_attempt_at)
              INTO due, next, first FROM jobs
             WHERE waiting_for = q AND owner_id = o AND next_attempt_at IS NOT NULL
               AND status IN ('pending', 'running', 'unknown');
          END IF;
          IF now_held AND NOT COALESCE(due, false) THEN
            DELETE FROM owner_queue WHERE queue = q AND owner_id = o AND NOT later;
          END IF;
          -- The later row covers what the now row does not: the future only while a now row stays (kept here for
          -- work due, or held by another transaction, whose own tidy recounts it); else everything, due or not.
          IF NOT ((now_held AND COALESCE(due, false)) OR (NOT now_held AND EXISTS (
                    SELECT 1 FROM owner_queue WHERE queue = q AND owner_id = o AND NOT later))) THEN
            next := first;
          END IF;
          IF later_held AND next IS NULL THEN
            DELETE FROM owner_queue WHERE queue = q AND owner_id = o AND later;
          ELSIF later_held THEN
            UPDATE owner_queue SET due_at = next WHERE queue = q AND owner_id = o AND later;
          ELSIF later_free AND next IS NOT NULL THEN
            -- Saying more than there is is safe: a create's row, inserted meanwhile, stays as it is.
            INSERT INTO owner_queue (queue, owner_id, later, due_at, pass)
            VALUES (q, o, true, next, COALESCE((SELECT pass FROM owner_shares WHERE owner_id = o), 0))
            ON CONFLICT DO NOTHING;
          END IF;
          tidied := tidied + 1;
        END LOOP;
        RETURN tidied;
      END $$`);
    // The work there is now: one row per queue and owner with a scheduled job, a claim tidies what is not due.
    await queryRunner.query(`
      INSERT INTO owner_queue (queue, owner_id, later, due_at, pass)
      SELECT COALESCE(j.waiting_for, ''), j.owner_id, false, '-infinity', COALESCE(max(s.pass), 0)
        FROM jobs j LEFT JOIN owner_shares s ON s.owner_id = j.owner_id
       WHERE j.next_attempt_at IS NOT NULL AND j.status IN ('pending', 'running', 'unknown')
       GROUP BY 1, 2`);
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`DROP TRIGGER "TRG_jobs_queue_update" ON jobs`);
    await queryRunner.query(`DROP TRIGGER "TRG_jobs_queue_insert" ON jobs`);
    await queryRunner.query(`DROP FUNCTION onejob_tidy_owner_queue(text[], text[])`);
    await queryRunner.query(`DROP FUNCTION onejob_queue_owner()`);
    await queryRunner.query(`DROP TABLE owner_queue`);
  }
}
