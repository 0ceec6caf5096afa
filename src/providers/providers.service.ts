import { Injectable } from '@nestjs/common';
import { ProviderCapacity, type CapacityView } from '../capacity/provider-capacity.js';
import type { JsonSchema } from '../config/catalog.types.js';
import { CatalogService } from './catalog.service.js';
import { CertificationService } from './certification.service.js';
import type { CertificationReport } from './certification.types.js';
import { ProviderRegistry } from './provider-registry.js';
import type { ProviderCapabilities } from './provider.port.js';

export interface ProviderView {
  name: string;
  kind: string;
  model: string;
  timeoutMs: number;
  hardTimeoutMs: number;
  onTimeout: string;
  sideEffectFree: boolean;
  maxAttempts: number;
  contextWindow: number;
  capabilities: ProviderCapabilities;
  /** Shared capacity, read now: caps, calls in flight, this minute's usage, a pause, the breaker (docs/design.md#capacity). */
  capacity: CapacityView;
  certifications: Array<{ operation: string; passed: boolean; current: boolean; certified: boolean; contractDigest: string; certifiedAt: string; reportId: string }>;
}

export interface OperationView {
  name: string;
  temperature: number;
  maxTokens: number;
  inputSchema: JsonSchema;
  outputSchema: JsonSchema;
  providers: string[];
  goldenCases: number;
}

/** The catalog as the API shows it. */
@Injectable()
export class ProvidersService {
  constructor(
    private readonly catalog: CatalogService,
    private readonly registry: ProviderRegistry,
    private readonly certification: CertificationService,
    private readonly capacity: ProviderCapacity,
  ) {}

  async listProviders(): Promise<ProviderView[]> {
    const specs = this.catalog.listProviders();
    const [reports, capacity] = await Promise.all([this.certification.currentCertifications(), this.capacity.views(specs)]);
    return specs.map((spec) => ({
      name: spec.name,
      kind: spec.kind,
      model: spec.model,
      timeoutMs: spec.timeoutMs,
      hardTimeoutMs: spec.hardTimeoutMs,
      onTimeout: spec.onTimeout,
      sideEffectFree: spec.sideEffectFree,
      maxAttempts: spec.maxAttempts,
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
        })),
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
