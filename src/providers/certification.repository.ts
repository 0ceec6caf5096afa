import { Injectable } from '@nestjs/common';
import { DataSource } from 'typeorm';

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
    const rows: Row[] = await this.dataSource.query(
      `INSERT INTO certifications (provider, operation, contract_digest, passed, report) VALUES ($1, $2, $3, $4,
        $5::jsonb) RETURNING *`,
      [report.provider, report.operation, report.contractDigest, report.passed, JSON.stringify(report)],
    );
    return toReport(rows[0]);
  }

  /** The newest report for this provider, operation and contract digest: a later failure revokes an earlier pass. */
  async findLatest(
    provider: string,
    operation: string,
    contractDigest: string,
  ): Promise<CertificationReport | undefined> {
    const rows: Row[] = await this.dataSource.query(
      `SELECT * FROM certifications WHERE provider = $1 AND operation = $2 AND contract_digest = $3
        ORDER BY created_at DESC LIMIT 1`,
      [provider, operation, contractDigest],
    );
    return rows[0] && toReport(rows[0]);
  }

  /** The newest report per (provider, operation), whatever its digest. */
  async findLatestPerPair(): Promise<CertificationReport[]> {
    const rows: Row[] = await this.dataSource.query(
      `SELECT DISTINCT ON (provider, operation) * FROM certifications ORDER BY provider, operation, created_at DESC`,
    );
    return rows.map(toReport);
  }
}
