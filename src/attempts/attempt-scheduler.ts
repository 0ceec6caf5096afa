import { Injectable } from '@nestjs/common';
import { CatalogService } from '../providers/catalog.service.js';
import { CertificationService } from '../providers/certification.service.js';
import type { Ledger } from '../settlement/ledger.js';
import { SettlementService } from '../settlement/settlement.service.js';
import { isTerminal, type Job } from '../jobs/job.types.js';
import type { Attempt } from './attempt.types.js';
import { planNext, type Plan } from './planner.js';

/** Decides, under the job's row lock, what a job needs after an attempt ended: another attempt, or a final failure. */
@Injectable()
export class AttemptScheduler {
  constructor(
    private readonly catalog: CatalogService,
    private readonly certification: CertificationService,
    private readonly settlement: SettlementService,
  ) {}

  plan(job: Job, attempts: Attempt[]): Promise<Plan> {
    return planNext({
      chain: job.providers,
      attempts,
      provider: (name) => this.catalog.provider(name),
      isCertified: (provider) => this.certification.isCertified(provider, job.operation),
    });
  }

  /** After an attempt failed or was cancelled: schedule the next one (job back to `running`) or settle `failed`. */
  async scheduleAfter(ledger: Ledger, job: Job, readVersion: number, reason: string): Promise<Plan> {
    if (isTerminal(job.status)) return { kind: 'wait' };
    const plan = await this.plan(job, await ledger.listAttempts(job.id));
    if (plan.kind === 'attempt') await ledger.moveJob(job, 'running', reason, plan.delayMs);
    if (plan.kind === 'exhausted') await this.settleExhausted(ledger, job, readVersion, plan.lastError);
    return plan;
  }

  settleExhausted(ledger: Ledger, job: Job, readVersion: number, lastError: unknown): Promise<boolean> {
    return this.settlement.settleFailure(ledger, job, readVersion, {
      reason: 'providers_exhausted',
      message: 'Every provider of the chain failed or was given up, and no certified fallback is left.',
      lastError,
    });
  }
}
