import { Injectable } from '@nestjs/common';

import { isGated } from '../capacity/capacity.rules.js';
import {
  NotFoundError,
  UnknownOperationError,
  UnknownProviderError,
  ValidationFailedError,
} from '../common/domain.errors.js';
import { fingerprintOf } from '../common/fingerprint.js';
import { badCursor, decodeCursor, pageOf } from '../common/keyset-page.js';
import { isTerminal, type JobStatus, type JobWithAttempts, type ListedJob } from '../ledger/job.types.js';
import { JobSignals } from '../ledger/job-signals.js';
import { JobsRepository } from '../ledger/jobs.repository.js';
import { DuplicateIdempotencyKeyError, JobTerminalError, OverBudgetError } from '../ledger/ledger.errors.js';
import { LedgerFactory } from '../ledger/ledger.js';
import { MetricsService } from '../metrics/metrics.service.js';
import { CatalogService } from '../providers/catalog.service.js';
import { currentTraceparent, traced } from '../telemetry/tracing.js';
import { BudgetsService, worstCaseTokens } from '../usage/budgets.service.js';
import { WaitLimiter } from './wait-limiter.js';

export interface CreateJobCommand {
  operation: string;
  input: Record<string, unknown>;
  providers?: string[] | null;
  /** Not part of the fingerprint (fingerprintOf reads operation, input and providers only). */
  priority?: number;
}

export interface JobPage {
  items: ListedJob[];
  nextCursor: string | null;
}

/** How often a waiter looks at the database while no LISTEN session is up (behind a pooler without a direct URL). */
const FALLBACK_POLL_MS = 1000;

@Injectable()
export class JobsService {
  constructor(
    private readonly jobs: JobsRepository,
    private readonly ledgers: LedgerFactory,
    private readonly catalog: CatalogService,
    private readonly signals: JobSignals,
    private readonly waits: WaitLimiter,
    private readonly metrics: MetricsService,
    private readonly budgets: BudgetsService,
  ) {}

  /**
   * Writes the job and nothing else; no provider is called in the request path (docs/design.md#7-execution). A key
   * taken already throws DuplicateIdempotencyKeyError, which the route's IdempotencyInterceptor answers.
   */
  async create(
    ownerId: string,
    idempotencyKey: string,
    command: CreateJobCommand,
    waitSeconds = 0,
    gone?: AbortSignal,
  ): Promise<JobWithAttempts> {
    const operation = this.catalog.operation(command.operation);
    if (!operation) throw new UnknownOperationError(command.operation);
    command.providers?.forEach((name, i) => {
      if (!this.catalog.provider(name)) throw new UnknownProviderError(`providers[${i}]`, name);
    });
    const inputErrors = this.catalog.inputErrors(operation.name, command.input);
    if (inputErrors.length) throw new ValidationFailedError(inputErrors, 422);
    // Only an owner with a budget pays for the check: its create reserves its worst case under the budget row lock.
    const budgeted = await this.budgets.hasBudget(ownerId);

    const providers = command.providers ?? operation.providers;
    const primary = this.catalog.provider(providers[0])!;
    // A job for a capped provider queues behind its cap from the start: claims take it as the provider has room.
    const waitingFor = isGated(primary) ? primary.name : null;
    const fingerprint = fingerprintOf(command);
    const job = await traced('onejob.job.create', { 'onejob.operation': operation.name }, () =>
      this.ledgers.create({
        ownerId,
        idempotencyKey,
        fingerprint,
        operation: operation.name,
        input: command.input,
        providers,
        traceContext: currentTraceparent(),
        waitingFor,
        priority: command.priority ?? 0,
        worstCaseTokens: budgeted ? worstCaseTokens(operation, command.input) : undefined,
      }),
    ).catch(async (error: unknown) => {
      if (!(error instanceof OverBudgetError)) throw error;
      // Over budget, a retry of a job that exists still replays; a new intent is refused.
      if (await this.jobs.findOwnedByKey(ownerId, idempotencyKey)) {
        throw new DuplicateIdempotencyKeyError(ownerId, idempotencyKey, fingerprint);
      }
      throw this.budgets.exceeded(error, error.used);
    });
    this.signals.jobsDue(waitingFor);
    this.metrics.jobsCreated.inc({ operation: operation.name });
    if (waitSeconds > 0) return this.waitForTerminal(ownerId, job.id, waitSeconds, gone);
    return { ...job, attempts: [] };
  }

  /** The owner's job under this key, with its attempts: what a replay answers (JobsIdempotency). */
  findByKey(ownerId: string, idempotencyKey: string): Promise<JobWithAttempts | undefined> {
    return this.jobs.findOwnedByKey(ownerId, idempotencyKey);
  }

  async findOwned(ownerId: string, id: string, waitSeconds = 0, gone?: AbortSignal): Promise<JobWithAttempts> {
    if (waitSeconds > 0) return this.waitForTerminal(ownerId, id, waitSeconds, gone);
    const job = await this.jobs.findOwnedById(ownerId, id);
    if (!job) throw new NotFoundError('Job');
    return job;
  }

  async list(ownerId: string, query: { status?: JobStatus; limit: number; cursor?: string }): Promise<JobPage> {
    const items = await this.jobs.listOwned(ownerId, {
      status: query.status,
      limit: query.limit + 1,
      afterId: decodeCursor(query.cursor),
    });
    if (!items) throw badCursor();
    const { page, nextCursor } = pageOf(items, query.limit);
    return { items: page, nextCursor };
  }

  /**
   * The owner gives up the intent: the job is cancelled and its version bumped, so every in-flight result is
   * discarded.
   */
  async cancel(ownerId: string, id: string): Promise<JobWithAttempts> {
    await this.ledgers.run(async (ledger) => {
      const job = await ledger.lockOwnedJob(ownerId, id);
      if (!job) throw new NotFoundError('Job');
      if (isTerminal(job.status)) throw new JobTerminalError(job.status);
      await ledger.cancel(job);
    });
    return this.findOwned(ownerId, id);
  }

  /**
   * `Prefer: wait`: woken by the job's own settlement (in this process, or by NOTIFY from another), so a waiter
   * reads the database when it starts and when it wakes, never on a timer while LISTEN is up. It ends early
   * when the client goes away, and a process holds at most MAX_CONCURRENT_WAITS of them.
   */
  private async waitForTerminal(
    ownerId: string,
    id: string,
    waitSeconds: number,
    gone?: AbortSignal,
  ): Promise<JobWithAttempts> {
    const release = this.waits.acquire();
    try {
      const until = Date.now() + waitSeconds * 1000;
      for (;;) {
        const left = until - Date.now();
        const waiter = this.signals.waitFor(
          id,
          this.signals.listening ? Math.max(0, left) : Math.min(FALLBACK_POLL_MS, Math.max(0, left)),
          gone,
        );
        const job = await this.jobs.findOwnedById(ownerId, id);
        if (!job) {
          waiter.cancel();
          throw new NotFoundError('Job');
        }
        if (isTerminal(job.status) || left <= 0 || gone?.aborted) {
          waiter.cancel();
          return job;
        }
        await waiter.done;
      }
    } finally {
      release();
    }
  }
}
