import { CatalogError } from '../config/catalog.loader.js';
import type { ProviderSpec } from '../config/catalog.types.js';
import { readSecret } from '../config/secrets.js';
import { SimulatedAdapter } from './adapters/simulated.adapter.js';
import { CatalogService } from './catalog.service.js';
import type { ProviderAdapter } from './provider.port.js';

/**
 * Builds a provider's adapter. The SDK adapters (and js-tiktoken's encodings) are imported only when the catalog
 * has such a provider: a process serving simulated providers does not carry them in memory.
 */
export async function createAdapter(spec: ProviderSpec, index: number): Promise<ProviderAdapter> {
  if (spec.kind === 'simulated') return new SimulatedAdapter(spec);
  const apiKey = readSecret(spec.apiKeyEnv!);
  if (!apiKey) throw new CatalogError(`providers[${index}].apiKeyEnv`, `names the environment variable ${spec.apiKeyEnv}, which is not set`);
  if (spec.kind === 'openai') return new (await import('./adapters/openai.adapter.js')).OpenAiAdapter(spec, apiKey);
  return new (await import('./adapters/anthropic.adapter.js')).AnthropicAdapter(spec, apiKey);
}

/** One adapter per catalog provider, built at boot (a missing API key stops the boot, naming its variable). */
export class ProviderRegistry {
  private constructor(private readonly adapters: Map<string, ProviderAdapter>) {}

  static async load(catalog: CatalogService): Promise<ProviderRegistry> {
    const adapters = new Map<string, ProviderAdapter>();
    for (const [i, spec] of catalog.listProviders().entries()) adapters.set(spec.name, await createAdapter(spec, i));
    return new ProviderRegistry(adapters);
  }

  /** Undefined for a provider that is not (or no longer) in the catalog. */
  find(provider: string): ProviderAdapter | undefined {
    return this.adapters.get(provider);
  }

  adapter(provider: string): ProviderAdapter {
    const adapter = this.adapters.get(provider);
    if (!adapter) throw new Error(`no adapter for provider ${provider}`);
    return adapter;
  }
}

export const providerRegistryProvider = {
  provide: ProviderRegistry,
  inject: [CatalogService],
  useFactory: (catalog: CatalogService) => ProviderRegistry.load(catalog),
};
