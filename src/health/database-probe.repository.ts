import { Injectable } from '@nestjs/common';
import { DataSource } from 'typeorm';

import { migrationsApplied } from '../database/migrate.js';
import { rowsOf } from '../database/transactions.js';

/** The two questions readiness asks the database: does it answer, and is its schema the one this code expects. */
@Injectable()
export class DatabaseProbeRepository {
  constructor(private readonly dataSource: DataSource) {}

  async ping(): Promise<void> {
    await rowsOf(this.dataSource.manager, 'SELECT 1');
  }

  migrationsApplied(): Promise<boolean> {
    return migrationsApplied(this.dataSource);
  }
}
