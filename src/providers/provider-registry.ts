import { Injectable } from '@nestjs/common';
import { CatalogError } from '../config/catalog.loader.js';
import type { ProviderSpec } from '../config/catalog.types.js';
import { readSecret } from '../config/secrets.js';
import { AnthropicAdapter } from './adapters/anthropic.adapter.js';
import { OpenAiAdapter } from './adapters/openai.adapter.js';
import { SimulatedAdapter } from './adapters/simulated.adapter.js';
import { CatalogService } from './catalog.service.js';
import type { ProviderAdapter } from './provider.port.js';

export function createAdapter(spec: ProviderSpec, index: number): ProviderAdapter {
  if (spec.kind === 'simulated') return new SimulatedAdapter(spec);
  const apiKey = readSecret(spec.apiKeyEnv!);
  if (!apiKey) throw new CatalogError(`providers[${index}].apiKeyEnv`, `names the environment variable ${spec.apiKeyEnv}, which is not set`);
  return spec.kind === 'openai' ? new OpenAiAdapter(spec, apiKey) : new AnthropicAdapter(spec, apiKey);
}

/** One adapter per catalog provider, built at boot (a missing API key stops the boot, naming its variable). */
@Injectable()
export class ProviderRegistry {
  private readonly adapters = new Map<string, ProviderAdapter>();

  constructor(catalog: CatalogService) {
    catalog.listProviders().forEach((spec, i) => this.adapters.set(spec.name, createAdapter(spec, i)));
  }

  adapter(provider: string): ProviderAdapter {
    const adapter = this.adapters.get(provider);
    if (!adapter) throw new Error(`no adapter for provider ${provider}`);
    return adapter;
  }
}
