import { Injectable } from '@nestjs/common';
import { DataSource } from 'typeorm';

import { migrationsApplied } from '../database/migrate.js';
import { run } from '../database/transactions.js';
import { PING } from './database-probe.sql.js';

/** The two questions readiness asks the database: does it answer, and is its schema the one this code expects. */
@Injectable()
export class DatabaseProbeRepository {
  constructor(private readonly dataSource: DataSource) {}

  async ping(): Promise<void> {
    await run(this.dataSource.manager, PING);
  }

  migrationsApplied(): Promise<boolean> {
    return migrationsApplied(this.dataSource);
  }
}
