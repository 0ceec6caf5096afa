import { Injectable } from '@nestjs/common';

import { ProviderCapacity } from '../capacity/provider-capacity.js';
import { CatalogService } from './catalog.service.js';
import { CertificationService } from './certification.service.js';
import type { CertificationReport } from './certification.types.js';
import { ProviderRegistry } from './provider-registry.js';
import type { OperationView, ProviderView } from './providers.view.js';
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
    const [reports, capacity, schedule] = await Promise.all([
      this.certification.currentCertifications(),
      this.capacity.views(specs),
      this.recertifier.schedule(),
    ]);
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
      capacity: capacity.get(spec.name)!,
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
