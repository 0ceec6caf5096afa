import { Injectable, Logger } from '@nestjs/common';
import type { Job } from '../jobs/job.types.js';
import { MetricsService } from '../metrics/metrics.service.js';
import { CatalogService } from '../providers/catalog.service.js';
import { checkOutput } from '../providers/output-contract.js';
import { renderPrompt } from '../providers/prompt.js';
import { ProviderError, type ProviderResponse } from '../providers/provider.port.js';
import { ProviderRegistry } from '../providers/provider-registry.js';
import type { Attempt } from './attempt.types.js';
import { traced } from '../telemetry/tracing.js';
import { AttemptOutcomes } from './attempt-outcomes.js';

/**
 * Runs one claimed attempt, outside any transaction. The soft deadline (timeoutMs) does not abort the call:
 * it makes the attempt `unknown`, and the call goes on until hardTimeoutMs so a late result still competes.
 */
@Injectable()
export class AttemptRunner {
  private readonly logger = new Logger(AttemptRunner.name);

  constructor(
    private readonly catalog: CatalogService,
    private readonly registry: ProviderRegistry,
    private readonly outcomes: AttemptOutcomes,
    private readonly metrics: MetricsService,
  ) {}

  async run(job: Job, attempt: Attempt, shutdown: AbortSignal): Promise<void> {
    const operation = this.catalog.operation(job.operation)!;
    const provider = this.catalog.provider(attempt.provider)!;
    const log = { jobId: job.id, attemptId: attempt.id, provider: provider.name };
    let prompt;
    try {
      prompt = renderPrompt(operation, job.input);
    } catch (error) {
      // Nothing was sent: a definitive failure of this attempt, not of the provider.
      await this.outcomes.failed(attempt.id, job.id, { reason: 'render_failed', message: (error as Error).message, retryable: false });
      return;
    }
    if (!(await this.outcomes.markRunning(attempt.id, job.id))) return;

    const hardStop = AbortSignal.any([shutdown, AbortSignal.timeout(Math.max(1, attempt.hardDeadlineAt.getTime() - Date.now()))]);
    const soft = setTimeout(
      () => void this.outcomes.unknown(attempt.id, job.id, 'deadline_passed').catch((e: Error) => this.logger.error({ msg: 'deadline handling failed', ...log, error: e.message })),
      Math.max(0, attempt.deadlineAt.getTime() - Date.now()),
    );
    const started = process.hrtime.bigint();
    let response: ProviderResponse | undefined;
    let failure: ProviderError | undefined;
    try {
      response = await traced('onejob.provider.call', { 'onejob.provider': provider.name, 'onejob.attempt_id': attempt.id }, () => this.registry.adapter(provider.name).invoke({
        prompt,
        operation: operation.name,
        outputSchema: operation.outputSchema,
        temperature: operation.temperature,
        maxTokens: operation.maxTokens,
        idempotencyKey: attempt.id,
        signal: hardStop,
      }));
    } catch (error) {
      failure = error instanceof ProviderError ? error : new ProviderError('ambiguous', 'unexpected', (error as Error).message);
    } finally {
      clearTimeout(soft);
    }
    const seconds = Number(process.hrtime.bigint() - started) / 1e9;
    this.metrics.attemptDuration.observe({ provider: provider.name, outcome: response ? 'response' : failure!.kind }, seconds);

    if (response) {
      const check = checkOutput(this.catalog, operation.name, response.text);
      if (!check.ok) {
        await this.outcomes.failed(attempt.id, job.id, { reason: 'contract_violation', message: 'the output breaks the operation contract', retryable: false, details: check.errors }, response.usage);
        return;
      }
      const outcome = await traced('onejob.settle', { 'onejob.job_id': job.id }, () => this.outcomes.succeeded(attempt.id, job.id, { value: check.value, usage: response!.usage, providerRequestId: response!.requestId }));
      this.logger.debug({ msg: 'attempt result', ...log, outcome });
      return;
    }
    if (failure!.kind === 'definitive') {
      await this.outcomes.failed(attempt.id, job.id, { reason: failure!.reason, message: failure!.message, retryable: failure!.retryable, status: failure!.status });
    } else {
      await this.outcomes.unknown(attempt.id, job.id, failure!.reason, { message: failure!.message, shutdown: shutdown.aborted });
    }
  }
}
