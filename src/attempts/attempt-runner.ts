import { Injectable, Logger } from '@nestjs/common';

import { ProviderCapacity } from '../capacity/provider-capacity.js';
import { deadline } from '../common/deadline.js';
import { safeErrorFields } from '../common/log-safe.js';
import type { ProviderSpec } from '../config/catalog.types.js';
import { DatabaseOutage } from '../database/outage.js';
import { isDatabaseUnavailable, isRetryableTransactionError } from '../database/pg-errors.js';
import type { Attempt } from '../ledger/attempt.types.js';
import type { CallStart } from '../ledger/attempts.repository.js';
import type { Job } from '../ledger/job.types.js';
import { JobSignals } from '../ledger/job-signals.js';
import { LedgerFactory } from '../ledger/ledger.js';
import { MetricsService } from '../metrics/metrics.service.js';
import { CatalogService } from '../providers/catalog.service.js';
import { checkOutput } from '../providers/output-contract.js';
import { renderPrompt } from '../providers/prompt.js';
import { ProviderError, type ProviderResponse, RATE_LIMITED, type RenderedPrompt } from '../providers/provider.port.js';
import { ProviderRegistry } from '../providers/provider-registry.js';
import { traced } from '../telemetry/tracing.js';
import { AttemptOutcomes } from './attempt-outcomes.js';
import { backoffMs } from './planner.js';

export interface Claimed {
  job: Job;
  attempt: Attempt;
  /** Holds a lease on a capped provider (docs/design.md#capacity): released when the call ends. */
  leased?: boolean;
  /** The one call that decides a half-open breaker. */
  probe?: boolean;
}

/** An attempt marked running, with its prompt: ready to be sent. */
export interface Ready extends Claimed {
  prompt: RenderedPrompt;
}

const NOT_SENT_AFTER_LOST_ANSWER =
  'Its worker lost the answer to starting -> running and found it given up when it asked again: never sent.';

/** The latest hard deadline of a claimed batch: its outcomes are worth recording until then. */
const until = (claimed: Claimed[]) => new Date(Math.max(...claimed.map((c) => c.attempt.hardDeadlineAt.getTime())));

const sleep = (ms: number, signal: AbortSignal) =>
  new Promise<void>((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener('abort', () => (clearTimeout(timer), resolve()), { once: true });
  });

/**
 * Runs claimed attempts, outside any transaction. The soft deadline (timeoutMs) does not abort the call: it
 * makes the attempt `unknown`, and the call goes on until hardTimeoutMs so a late result still competes.
 */
@Injectable()
export class AttemptRunner {
  private readonly logger = new Logger(AttemptRunner.name);
  /** Outcomes held through an outage (persist): one line when recording them loses the database, one when back. */
  private readonly outage = new DatabaseOutage(this.logger, 'recording outcomes');

  constructor(
    private readonly catalog: CatalogService,
    private readonly registry: ProviderRegistry,
    private readonly ledgers: LedgerFactory,
    private readonly outcomes: AttemptOutcomes,
    private readonly metrics: MetricsService,
    private readonly capacity: ProviderCapacity,
    private readonly signals: JobSignals,
  ) {}

  /**
   * Renders each claimed attempt's prompt and marks the batch `running` in one statement, deadlines counted
   * from this moment (a claim that waited keeps its full timeout). Returns the attempts that may be sent.
   */
  async begin(claimed: Claimed[], shutdown: AbortSignal = new AbortController().signal): Promise<Map<string, Ready>> {
    const rendered: Ready[] = [];
    for (const one of claimed) {
      const { job, attempt } = one;
      try {
        rendered.push({ ...one, prompt: renderPrompt(this.catalog.operation(job.operation)!, job.input) });
      } catch (error) {
        // Nothing was sent: a definitive failure of this attempt, not of the provider.
        if (one.leased) void this.capacity.release(attempt.id);
        await this.outcomes.failed(attempt.id, job.id, {
          reason: 'render_failed',
          message: (error as Error).message,
          retryable: false,
        });
      }
    }
    const calls = rendered.map(({ attempt }) => {
      const spec = this.catalog.provider(attempt.provider)!;
      return { id: attempt.id, timeoutMs: spec.timeoutMs, hardTimeoutMs: spec.hardTimeoutMs };
    });
    const marked = await this.markRunning(calls, claimed, shutdown);
    const running = new Map(marked.attempts.map((a) => [a.id, a]));
    const ready = new Map<string, Ready>();
    for (const r of rendered) {
      const attempt = running.get(r.attempt.id);
      if (attempt) {
        ready.set(attempt.id, { ...r, attempt });
        continue;
      }
      if (r.leased) void this.capacity.release(r.attempt.id); // given up before the call: its capacity is free
      // Marked `running` by the answer that was lost, and since past its deadline (`unknown`, where a held policy
      // would keep it for good): only this worker knows it was never sent.
      if (marked.answerLost && r.attempt.workerId) {
        const { id, jobId, workerId } = r.attempt;
        await this.persist(
          () => this.outcomes.notSent(id, jobId, NOT_SENT_AFTER_LOST_ANSWER, workerId),
          until(claimed),
          shutdown,
          {
            jobId,
            attemptId: id,
          },
        );
      }
    }
    return ready;
  }

  /**
   * starting -> running through an outage. Its answer can be lost after it committed (a failover cuts the session
   * while COMMIT waits for the standby, docs/operations.md#failover): the attempts are then `running` with nothing
   * sent, and left so they would be `unknown` at their deadline, for good where the provider's policy holds. Asked
   * again, it also reads back what this worker marked already (MARKED_BY_WORKER): only this call marks them, and it
   * has sent nothing yet.
   */
  private async markRunning(
    calls: CallStart[],
    claimed: Claimed[],
    shutdown: AbortSignal,
  ): Promise<{ attempts: Attempt[]; answerLost: boolean }> {
    if (!calls.length) return { attempts: [], answerLost: false };
    const workerId = claimed[0].attempt.workerId ?? undefined;
    let asked = 0;
    const attempts = await this.persist(
      () => this.ledgers.markRunning(calls, asked++ ? workerId : undefined),
      until(claimed),
      shutdown,
      { attempts: calls.length },
    );
    return { attempts, answerLost: asked > 1 };
  }

  /** Calls the provider and records the outcome; `callEnded` runs as soon as the call itself is over. */
  async call(ready: Ready, shutdown: AbortSignal, callEnded: () => void = () => undefined): Promise<void> {
    const { job, attempt, prompt } = ready;
    const operation = this.catalog.operation(job.operation)!;
    const provider = this.catalog.provider(attempt.provider)!;
    const log = { jobId: job.id, attemptId: attempt.id, provider: provider.name };
    const report = <T>(work: () => Promise<T>) => this.persist(work, attempt.hardDeadlineAt, shutdown, log);
    const health = (work: () => Promise<void>) =>
      work().catch((e: unknown) =>
        this.logger.error({ msg: 'provider health bookkeeping failed', ...log, ...safeErrorFields(e) }),
      );
    let countedTimeout = false;

    // Our own timer, not AbortSignal.timeout composed with AbortSignal.any: a collection can take that one with
    // its timer, and then a call that drips its body after the headers holds its slot for ever (issue 22 item 1).
    const hardStop = deadline(Math.max(1, attempt.hardDeadlineAt.getTime() - Date.now()), shutdown);
    const soft = setTimeout(
      () => {
        // A timeout counts against the provider's breaker at once; the call goes on until the hard deadline.
        countedTimeout = true;
        void health(() => this.capacity.recordFailure(provider, attempt.id));
        void this.outcomes
          .unknown(attempt.id, job.id, 'deadline_passed')
          .catch((e: Error) => this.logger.error({ msg: 'deadline handling failed', ...log, ...safeErrorFields(e) }));
      },
      Math.max(0, attempt.deadlineAt.getTime() - Date.now()),
    );
    const started = process.hrtime.bigint();
    let response: ProviderResponse | undefined;
    let failure: ProviderError | undefined;
    this.capacity.callStarted(provider.name);
    try {
      response = await traced(
        'onejob.provider.call',
        { 'onejob.provider': provider.name, 'onejob.attempt_id': attempt.id },
        () =>
          this.registry.adapter(provider.name).invoke({
            prompt,
            operation: operation.name,
            outputSchema: operation.outputSchema,
            temperature: operation.temperature,
            maxTokens: operation.maxTokens,
            maxResponseBytes: operation.maxResponseBytes,
            idempotencyKey: attempt.id,
            signal: hardStop.signal,
            followUntil: attempt.deadlineAt,
            // Committed before the adapter waits for the outcome, through an outage too (until the soft deadline).
            onSubmitted: (providerRequestId) =>
              this.persist(
                () => this.outcomes.submitted(attempt.id, job.id, providerRequestId),
                attempt.deadlineAt,
                shutdown,
                log,
              ),
          }),
      );
    } catch (error) {
      failure =
        error instanceof ProviderError ? error : new ProviderError('ambiguous', 'unexpected', (error as Error).message);
    } finally {
      clearTimeout(soft);
      hardStop.clear();
      this.capacity.callEnded(provider.name);
      callEnded();
      if (ready.leased) {
        // The lease goes to this process's next claim on the same provider, or back (docs/design.md#capacity).
        if (this.capacity.keepSpare(provider, attempt.id)) this.signals.capacityFreed();
        else void this.capacity.release(attempt.id).then(() => this.signals.capacityFreed());
      }
    }
    const seconds = Number(process.hrtime.bigint() - started) / 1e9;
    this.metrics.attemptDuration.observe(
      { provider: provider.name, outcome: response ? 'response' : failure!.kind },
      seconds,
    );
    // A timeout already counted at the soft deadline, or a call we aborted ourselves, is not counted (again).
    await this.learn(ready, provider, response ? undefined : failure, countedTimeout || shutdown.aborted, health);

    if (response) {
      const check = checkOutput(this.catalog, operation.name, response.text);
      if (!check.ok) {
        await report(() =>
          this.outcomes.failed(
            attempt.id,
            job.id,
            {
              reason: 'contract_violation',
              message: 'the output breaks the operation contract',
              retryable: false,
              details: check.errors,
            },
            response.usage,
          ),
        );
        return;
      }
      const arrived = { value: check.value, usage: response.usage, providerRequestId: response.requestId };
      const outcome = await report(() =>
        traced('onejob.settle', { 'onejob.job_id': job.id }, () =>
          this.outcomes.succeeded(attempt.id, job.id, arrived),
        ),
      );
      this.logger.debug({ msg: 'attempt result', ...log, outcome });
      return;
    }
    if (failure!.kind === 'definitive') {
      const { reason, message, retryable, status, retryAfterMs } = failure!;
      await report(() =>
        this.outcomes.failed(attempt.id, job.id, { reason, message, retryable, status, retryAfterMs }),
      );
    } else if (!(countedTimeout && failure!.reason === 'timeout')) {
      // (A timeout past the soft deadline is already unknown: the timer moved it, or the reconciler will.)
      await report(() =>
        this.outcomes.unknown(attempt.id, job.id, failure!.reason, {
          message: failure!.message,
          shutdown: shutdown.aborted,
        }),
      );
    }
  }

  /**
   * What a call teaches about its provider, for every replica (docs/design.md#capacity), recorded before the
   * outcome so the job's next plan sees it: a rate-limit answer pauses the provider; a timeout or a retryable
   * failure counts against its breaker; any answer to the half-open probe closes the breaker.
   */
  private async learn(
    ready: Ready,
    provider: ProviderSpec,
    failure: ProviderError | undefined,
    alreadyCounted: boolean,
    health: (work: () => Promise<void>) => Promise<void>,
  ): Promise<void> {
    const attemptId = ready.attempt.id;
    if (failure?.reason === RATE_LIMITED) {
      await health(() => this.capacity.pause(provider.name, failure.retryAfterMs));
      return;
    }
    // An answer, even a refusal of this request (a 4xx), shows the provider is up.
    const counted = failure !== undefined && (failure.kind === 'ambiguous' || failure.retryable);
    if (!counted) {
      if (ready.probe) await health(() => this.capacity.recordProbeAnswer(provider, attemptId));
      return;
    }
    if (!alreadyCounted) await health(() => this.capacity.recordFailure(provider, attemptId));
  }

  /**
   * A worker that holds a provider's answer keeps trying to record it through a database outage (backoff,
   * until the attempt's hard deadline or shutdown): the answer was paid for, and an `unknown` left behind would
   * need an operator. Past that, the reconciler's lookup is the remaining path.
   */
  private async persist<T>(work: () => Promise<T>, until: Date, shutdown: AbortSignal, log: object): Promise<T> {
    for (let failures = 1; ; failures++) {
      try {
        const done = await work();
        this.outage.recovered();
        return done;
      } catch (error) {
        const transient = isDatabaseUnavailable(error) || isRetryableTransactionError(error);
        if (!transient || shutdown.aborted || Date.now() >= until.getTime()) throw error;
        // A failover: one line for every outcome held through it, not one per outcome and retry.
        if (!this.outage.failed(error)) {
          this.logger.warn({
            msg: 'recording the outcome failed; retrying',
            ...log,
            failures,
            ...safeErrorFields(error),
          });
        }
        await sleep(Math.min(backoffMs(failures), Math.max(0, until.getTime() - Date.now())), shutdown);
      }
    }
  }
}
