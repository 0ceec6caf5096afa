import { Injectable } from '@nestjs/common';
import { DataSource } from 'typeorm';

import { migrationsApplied } from '../database/migrate.js';
import { rowsOf } from '../database/transactions.js';
import { PRIMARY_STATE, type PrimaryStateRow, REPLICATION_STATE } from './database-probe.sql.js';

/** The questions readiness and the primary watch ask the database. */
@Injectable()
export class DatabaseProbeRepository {
  constructor(private readonly dataSource: DataSource) {}

  migrationsApplied(): Promise<boolean> {
    return migrationsApplied(this.dataSource);
  }

  async primaryState(): Promise<PrimaryStateRow> {
    const [row] = await rowsOf(this.dataSource.manager, PRIMARY_STATE, []);
    return row;
  }

  async replicationState(): Promise<{
    standbyNames: string;
    commit: string;
    standbys: number;
    syncStandbys: number | null;
  }> {
    const [row] = await rowsOf(this.dataSource.manager, REPLICATION_STATE, []);
    return {
      standbyNames: row.standby_names,
      commit: row.commit,
      standbys: row.standbys,
      syncStandbys: row.sync_standbys,
    };
  }
}
