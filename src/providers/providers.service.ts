import { Injectable } from '@nestjs/common';

import type { ProviderState } from '../capacity/capacity.rules.js';
import { ProviderCapacity } from '../capacity/provider-capacity.js';
import type { ProviderSpec } from '../config/catalog.types.js';
import { CatalogService } from './catalog.service.js';
import { CertificationService } from './certification.service.js';
import type { CertificationReport } from './certification.types.js';
import { ProviderRegistry } from './provider-registry.js';
import type { CapacityView, OperationView, ProviderView } from './providers.view.js';
import { Recertifier } from './recertifier.js';

/** The catalog as the API shows it. */
@Injectable()
export class ProvidersService {
  constructor(
    private readonly catalog: CatalogService,
    private readonly registry: ProviderRegistry,
    private readonly certification: CertificationService,
    private readonly capacity: ProviderCapacity,
    private readonly recertifier: Recertifier,
  ) {}

  async listProviders(): Promise<ProviderView[]> {
    const specs = this.catalog.listProviders();
    const [reports, { states, inFlight }, schedule] = await Promise.all([
      this.certification.currentCertifications(),
      this.capacity.readNow(),
      this.recertifier.schedule(),
    ]);
    const stateOf = new Map(states.map((s) => [s.provider, s]));
    const nextRun = (provider: string, operation: string) =>
      schedule.find((s) => s.provider === provider && s.operation === operation)?.nextRunAt.toISOString() ?? null;
    return specs.map((spec) => ({
      name: spec.name,
      kind: spec.kind,
      model: spec.model,
      timeoutMs: spec.timeoutMs,
      hardTimeoutMs: spec.hardTimeoutMs,
      onTimeout: spec.onTimeout,
      sideEffectFree: spec.sideEffectFree,
      maxAttempts: spec.maxAttempts,
      maxDeferrals: spec.maxDeferrals,
      contextWindow: spec.contextWindow,
      capabilities: this.registry.adapter(spec.name).capabilities,
      capacity: capacityView(spec, stateOf.get(spec.name), inFlight.get(spec.name) ?? 0),
      certifications: reports
        .filter((r) => r.provider === spec.name)
        .map((r) => ({
          operation: r.operation,
          passed: r.passed,
          current: r.current,
          // What failover asks: passed, for the catalog's current contract.
          certified: r.passed && r.current,
          contractDigest: r.contractDigest,
          certifiedAt: r.createdAt,
          reportId: r.id,
          trigger: r.trigger ?? 'request',
          nextRunAt: nextRun(spec.name, r.operation),
        })),
      recertify: { everyHours: spec.recertify?.everyHours ?? null },
    }));
  }

  listOperations(): OperationView[] {
    return this.catalog.listOperations().map((op) => ({
      name: op.name,
      temperature: op.temperature,
      maxTokens: op.maxTokens,
      inputSchema: op.inputSchema,
      outputSchema: op.outputSchema,
      providers: op.providers,
      goldenCases: op.goldenCases.length,
    }));
  }

  certify(provider: string, operation: string): Promise<CertificationReport> {
    return this.certification.certify(provider, operation);
  }
}

/**
 * A provider's capacity as GET /v1/providers shows it, from its state read now (docs/design.md#capacity).
 * `attempts`: its calls in flight counted from the attempts, for a provider without leases (no maxConcurrency).
 */
function capacityView(spec: ProviderSpec, state: ProviderState | undefined, attempts: number): CapacityView {
  const now = state?.now.getTime() ?? Date.now();
  const windowStart = Math.floor(now / 60_000) * 60_000;
  const current = state?.windowStart?.getTime() === windowStart;
  const breakerWindow = spec.breaker?.windowMs ?? 0;
  return {
    inFlight: spec.maxConcurrency !== undefined ? (state?.inFlight ?? 0) : attempts,
    maxConcurrency: spec.maxConcurrency ?? null,
    requestsPerMinute: spec.requestsPerMinute ?? null,
    tokensPerMinute: spec.tokensPerMinute ?? null,
    requestsThisMinute: current ? state!.requestsInWindow : 0,
    tokensThisMinute: current ? state!.tokensInWindow : 0,
    pausedUntil: state?.pausedUntil && state.pausedUntil.getTime() > now ? state.pausedUntil.toISOString() : null,
    breaker: {
      state: state?.breaker ?? 'closed',
      since: state?.breakerSince?.toISOString() ?? null,
      failuresInWindow: state ? state.failures.filter((t) => t.getTime() > now - breakerWindow).length : 0,
    },
  };
}
