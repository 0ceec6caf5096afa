import { Injectable } from '@nestjs/common';

import { ProviderCapacity } from '../capacity/provider-capacity.js';
import type { Attempt } from '../ledger/attempt.types.js';
import { isTerminal, type Job } from '../ledger/job.types.js';
import type { Ledger } from '../ledger/ledger.js';
import { CatalogService } from '../providers/catalog.service.js';
import { CertificationService } from '../providers/certification.service.js';
import { type Plan, planNext } from './planner.js';

const EXHAUSTED_MESSAGES = {
  providers_exhausted: 'Every provider of the chain failed or was given up, and no certified fallback is left.',
  provider_unavailable: 'No provider of the chain is in the catalog any more (or none left is certified).',
} as const;

/** Decides, under the job's row lock, what a job needs after an attempt ended: another attempt, or a final failure. */
@Injectable()
export class AttemptScheduler {
  constructor(
    private readonly catalog: CatalogService,
    private readonly certification: CertificationService,
    private readonly capacity: ProviderCapacity,
  ) {}

  plan(job: Job, attempts: Attempt[]): Promise<Plan> {
    return planNext({
      chain: job.providers,
      attempts,
      provider: (name) => this.catalog.provider(name),
      isCertified: (provider) => this.certification.isCertified(provider, job.operation),
      gate: (provider) => this.capacity.gate(provider),
    });
  }

  /**
   * After an attempt failed or was cancelled: schedule the next one (job back to `running`), defer the job behind
   * a paused provider or an open breaker (`pending`: nothing runs), or settle `failed`.
   */
  async scheduleAfter(ledger: Ledger, job: Job, readVersion: number, reason: string): Promise<Plan> {
    if (isTerminal(job.status)) return { kind: 'wait' };
    const plan = await this.plan(job, await ledger.listAttempts(job.id));
    if (plan.kind === 'attempt') await ledger.moveJob(job, 'running', reason, plan.delayMs);
    if (plan.kind === 'defer') await this.defer(ledger, job, plan);
    if (plan.kind === 'exhausted') await this.settleExhausted(ledger, job, readVersion, plan);
    return plan;
  }

  /** The job waits on the gated provider, `pending`, until its pause or cooldown ends or it opens sooner. */
  async defer(ledger: Ledger, job: Job, plan: Extract<Plan, { kind: 'defer' }>): Promise<void> {
    this.capacity.throttled(plan.provider, plan.reason);
    await ledger.deferOn(job, plan.provider, `deferred_${plan.reason}`, plan.delayMs);
  }

  settleExhausted(
    ledger: Ledger,
    job: Job,
    readVersion: number,
    plan: Extract<Plan, { kind: 'exhausted' }>,
  ): Promise<boolean> {
    return ledger.settleFailure(job, readVersion, {
      reason: plan.reason,
      message: EXHAUSTED_MESSAGES[plan.reason],
      lastError: plan.lastError,
    });
  }
}
