import type { FieldError } from '../common/domain.errors.js';
import type { ProviderUsage } from './provider.port.js';

export interface CertificationCase {
  index: number;
  passed: boolean;
  errors: FieldError[];
  latencyMs: number;
  usage: ProviderUsage | null;
}

export interface CertificationReport {
  id: string;
  provider: string;
  operation: string;
  model: string;
  contractDigest: string;
  passed: boolean;
  createdAt: string;
  render: { passed: boolean; errors: string[] };
  tokens: {
    passed: boolean;
    promptTokens: number;
    maxTokens: number;
    contextWindow: number;
    counter: 'tiktoken' | 'estimate';
  };
  cases: CertificationCase[];
  /** `request`: an admin's POST or the CLI; `schedule`: the provider's `recertify`. Absent on older reports. */
  trigger?: 'request' | 'schedule';
  /** What the run's calls cost at the provider's pricing; null without pricing. Absent on older reports. */
  cost?: { amount: number; currency: string } | null;
}
