import { Injectable } from '@nestjs/common';
import { DataSource } from 'typeorm';

import { FIND_LATEST, FIND_LATEST_PER_PAIR, INSERT_REPORT } from './certification.sql.js';
import type { CertificationReport } from './certification.types.js';

type Row = {
  id: string;
  provider: string;
  operation: string;
  contract_digest: string;
  passed: boolean;
  report: CertificationReport;
  created_at: Date;
};

const toReport = (row: Row): CertificationReport => ({
  ...row.report,
  id: row.id,
  createdAt: row.created_at.toISOString(),
});

@Injectable()
export class CertificationRepository {
  constructor(private readonly dataSource: DataSource) {}

  async insertReport(report: Omit<CertificationReport, 'id' | 'createdAt'>): Promise<CertificationReport> {
    const rows: Row[] = await this.dataSource.query(INSERT_REPORT.text, [
      report.provider,
      report.operation,
      report.contractDigest,
      report.passed,
      JSON.stringify(report),
    ]);
    return toReport(rows[0]);
  }

  /** The newest report for this provider, operation and contract digest: a later failure revokes an earlier pass. */
  async findLatest(
    provider: string,
    operation: string,
    contractDigest: string,
  ): Promise<CertificationReport | undefined> {
    const rows: Row[] = await this.dataSource.query(FIND_LATEST.text, [provider, operation, contractDigest]);
    return rows[0] && toReport(rows[0]);
  }

  /** The newest report per (provider, operation), whatever its digest. */
  async findLatestPerPair(): Promise<CertificationReport[]> {
    const rows: Row[] = await this.dataSource.query(FIND_LATEST_PER_PAIR.text);
    return rows.map(toReport);
  }
}
