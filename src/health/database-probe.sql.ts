import { statement } from '../database/prepared-statements.js';

export interface PrimaryStateRow {
  recovery: boolean;
  read_only: boolean;
  server: string;
}

/**
 * Readiness's and the primary watch's question (src/health/primary-watch.ts): does the server take writes, and
 * which server is it (address, port and start time: another one after a failover, or after a restart of the same).
 */
export const PRIMARY_STATE = statement<[], PrimaryStateRow>(
  'primary_state',
  `SELECT pg_is_in_recovery() AS recovery, current_setting('transaction_read_only') = 'on' AS read_only,
          concat_ws(' ', inet_server_addr(), inet_server_port(), pg_postmaster_start_time()) AS server`,
);

/**
 * What replication the primary runs with (src/health/replication-check.ts): synchronous when synchronous_commit
 * waits for a standby and synchronous_standby_names names one; the standbys' sync_state where this role may read it
 * (pg_stat_replication shows it to superusers and pg_read_all_stats only: null otherwise).
 */
export const REPLICATION_STATE = statement<
  [],
  { standby_names: string; commit: string; standbys: number; sync_standbys: number | null }
>(
  'replication_state',
  `SELECT current_setting('synchronous_standby_names') AS standby_names,
          current_setting('synchronous_commit') AS commit,
          (SELECT count(*)::int FROM pg_stat_replication) AS standbys,
          (SELECT count(*) FILTER (WHERE sync_state IN ('sync', 'quorum'))::int
             FROM pg_stat_replication HAVING count(sync_state) = count(*)) AS sync_standbys`,
);
