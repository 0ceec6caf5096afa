import { Injectable, Logger } from '@nestjs/common';

import { canonicalJson, sha256Hex } from '../common/canonical-json.js';
import { deadline } from '../common/deadline.js';
import { NotFoundError, UnknownOperationError } from '../common/domain.errors.js';
import type { OperationSpec, ProviderSpec } from '../config/catalog.types.js';
import { MetricsService } from '../metrics/metrics.service.js';
import { CatalogService } from './catalog.service.js';
import { CertificationRepository } from './certification.repository.js';
import type { CertificationCase, CertificationReport } from './certification.types.js';
import { checkOutput } from './output-contract.js';
import { renderPrompt } from './prompt.js';
import { ProviderError, type RenderedPrompt } from './provider.port.js';
import { ProviderRegistry } from './provider-registry.js';

/**
 * Hash of everything the contract depends on: a change to any of it voids a certification
 * (docs/design.md#6-providers-operations-certification).
 */
export function contractDigest(operation: OperationSpec, provider: ProviderSpec): string {
  return sha256Hex(
    canonicalJson({
      prompt: operation.prompt,
      inputSchema: operation.inputSchema,
      outputSchema: operation.outputSchema,
      temperature: operation.temperature,
      maxTokens: operation.maxTokens,
      model: provider.model,
      // Another API is another contract (the Responses API's output comes back differently); the default, `chat`,
      // leaves the digest as it was before `api` existed, so no certification made then is voided by an upgrade.
      ...(provider.api && provider.api !== 'chat' ? { api: provider.api } : {}),
    }),
  );
}

/** The run's calls at the provider's pricing (the formula of docs/operations.md#cost); null without pricing. */
function costOf(cases: CertificationCase[], provider: ProviderSpec): CertificationReport['cost'] {
  if (!provider.pricing) return null;
  const { inputPerMTok, outputPerMTok, currency } = provider.pricing;
  const micro = cases.reduce(
    (n, c) => n + (c.usage ? c.usage.promptTokens * inputPerMTok + c.usage.completionTokens * outputPerMTok : 0),
    0,
  );
  return { amount: Math.round((micro / 1e6) * 1e8) / 1e8, currency };
}

const PLACEHOLDER_LEFT = /\{\{|\}\}/;

@Injectable()
export class CertificationService {
  private readonly logger = new Logger(CertificationService.name);

  constructor(
    private readonly catalog: CatalogService,
    private readonly registry: ProviderRegistry,
    private readonly certifications: CertificationRepository,
    private readonly metrics: MetricsService,
  ) {}

  /** Render check, token check, then every golden case through the full round trip; the report is stored either way. */
  async certify(
    providerName: string,
    operationName: string,
    trigger: 'request' | 'schedule' = 'request',
  ): Promise<CertificationReport> {
    const provider = this.catalog.provider(providerName);
    if (!provider) throw new NotFoundError(`Provider ${JSON.stringify(providerName)}`);
    const operation = this.catalog.operation(operationName);
    if (!operation) throw new UnknownOperationError(operationName);
    const adapter = this.registry.adapter(provider.name);

    const renderErrors: string[] = [];
    const prompts: RenderedPrompt[] = [];
    for (const golden of operation.goldenCases) {
      try {
        const prompt = renderPrompt(operation, golden.input);
        if (PLACEHOLDER_LEFT.test(`${prompt.system ?? ''}${prompt.user}`)) {
          renderErrors.push('the rendered prompt still holds a {{ or }}');
        }
        prompts.push(prompt);
      } catch (error) {
        renderErrors.push((error as Error).message);
      }
    }
    if (!operation.goldenCases.length) renderErrors.push('the operation has no golden cases to certify with');
    const promptTokens = Math.max(0, ...prompts.map((p) => adapter.countPromptTokens(p)));
    const tokens = {
      passed: promptTokens + operation.maxTokens <= provider.contextWindow,
      promptTokens,
      maxTokens: operation.maxTokens,
      contextWindow: provider.contextWindow,
      counter: provider.kind === 'openai' ? ('tiktoken' as const) : ('estimate' as const),
    };
    const render = { passed: renderErrors.length === 0, errors: renderErrors };

    const cases: CertificationCase[] = [];
    if (render.passed && tokens.passed) {
      for (const [index, prompt] of prompts.entries()) {
        cases.push(await this.runCase(index, prompt, operation, provider));
      }
    }
    const passed = render.passed && tokens.passed && cases.length > 0 && cases.every((c) => c.passed);
    const report = await this.certifications.insertReport({
      provider: provider.name,
      operation: operation.name,
      model: provider.model,
      contractDigest: contractDigest(operation, provider),
      passed,
      render,
      tokens,
      cases,
      trigger,
      cost: costOf(cases, provider),
    });
    this.logger.log({ msg: 'certification', provider: provider.name, operation: operation.name, passed, trigger });
    this.metrics.certificationRuns.inc({
      provider: provider.name,
      operation: operation.name,
      trigger,
      passed: String(passed),
    });
    return report;
  }

  /** The question failover asks (I6): does the provider hold a passing certification for the current contract? */
  async isCertified(providerName: string, operationName: string): Promise<boolean> {
    const provider = this.catalog.provider(providerName);
    const operation = this.catalog.operation(operationName);
    if (!provider || !operation) return false;
    const latest = await this.certifications.findLatest(
      provider.name,
      operation.name,
      contractDigest(operation, provider),
    );
    return latest?.passed === true;
  }

  /** Every (provider, operation) pair's newest report, marked current when its digest matches the catalog. */
  async currentCertifications(): Promise<Array<CertificationReport & { current: boolean }>> {
    const reports = await this.certifications.findLatestPerPair();
    return reports.map((report) => {
      const provider = this.catalog.provider(report.provider);
      const operation = this.catalog.operation(report.operation);
      return {
        ...report,
        current: !!provider && !!operation && contractDigest(operation, provider) === report.contractDigest,
      };
    });
  }

  private async runCase(
    index: number,
    prompt: RenderedPrompt,
    operation: OperationSpec,
    provider: ProviderSpec,
  ): Promise<CertificationCase> {
    const started = Date.now();
    // A timer of our own: AbortSignal.timeout can be collected before it fires (src/common/deadline.ts).
    const hard = deadline(provider.hardTimeoutMs);
    try {
      const response = await this.registry.adapter(provider.name).invoke({
        prompt,
        operation: operation.name,
        outputSchema: operation.outputSchema,
        temperature: operation.temperature,
        maxTokens: operation.maxTokens,
        maxResponseBytes: operation.maxResponseBytes,
        idempotencyKey: `certify-${provider.name}-${operation.name}-${index}-${started}`,
        signal: hard.signal,
        // A request the provider keeps by id (OpenAI's Responses) is followed to the hard deadline, not the soft
        // one: a case has no look-up after it, so a slow but correct provider answers within hardTimeoutMs or not.
        followUntil: new Date(started + provider.hardTimeoutMs),
      });
      const check = checkOutput(this.catalog, operation.name, response.text);
      return {
        index,
        passed: check.ok,
        errors: check.ok ? [] : check.errors,
        latencyMs: Date.now() - started,
        usage: response.usage,
      };
    } catch (error) {
      const reason = error instanceof ProviderError ? `${error.kind}: ${error.reason}` : 'error';
      return {
        index,
        passed: false,
        errors: [{ field: 'provider', message: `${reason}: ${(error as Error).message}` }],
        latencyMs: Date.now() - started,
        usage: null,
      };
    } finally {
      hard.clear();
    }
  }
}
