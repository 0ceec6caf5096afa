import { HostLookup } from '../common/host-lookup.js';
import { type AppConfig, appConfig } from '../config/app.config.js';
import { CatalogError } from '../config/catalog.loader.js';
import type { ProviderSpec } from '../config/catalog.types.js';
import { readSecret } from '../config/secrets.js';
import { SimulatedAdapter } from './adapters/simulated.adapter.js';
import { CatalogService } from './catalog.service.js';
import type { ProviderAdapter } from './provider.port.js';
import { ProviderHttp } from './provider-http.js';

/**
 * Builds a provider's adapter. The SDK adapters (and js-tiktoken's encodings) are imported only when the catalog
 * has such a provider: a process serving simulated providers does not carry them in memory.
 */
export async function createAdapter(spec: ProviderSpec, index: number, lookup: HostLookup): Promise<ProviderAdapter> {
  if (spec.kind === 'simulated') return new SimulatedAdapter(spec);
  const apiKey = readSecret(spec.apiKeyEnv!);
  if (!apiKey) {
    throw new CatalogError(
      `providers[${index}].apiKeyEnv`,
      `names the environment variable ${spec.apiKeyEnv}, which is not set`,
    );
  }
  // A connection (TCP and TLS) that takes longer than the soft deadline fails as not sent, before the attempt
  // would be unknown; at least 1 s, so a short deadline does not refuse a distant provider's handshake.
  const http = new ProviderHttp(lookup, Math.max(1000, Math.min(spec.timeoutMs, 10_000)));
  if (spec.kind === 'openai' && spec.api === 'responses') {
    return new (await import('./adapters/openai-responses.adapter.js')).OpenAiResponsesAdapter(spec, apiKey, http);
  }
  if (spec.kind === 'openai') {
    return new (await import('./adapters/openai.adapter.js')).OpenAiAdapter(spec, apiKey, http);
  }
  return new (await import('./adapters/anthropic.adapter.js')).AnthropicAdapter(spec, apiKey, http);
}

/** One adapter per catalog provider, built at boot (a missing API key stops the boot, naming its variable). */
export class ProviderRegistry {
  private constructor(
    private readonly adapters: Map<string, ProviderAdapter>,
    private readonly lookup: HostLookup,
  ) {}

  static async load(
    catalog: CatalogService,
    config: Pick<AppConfig, 'dnsTimeoutMs' | 'dnsServers'>,
  ): Promise<ProviderRegistry> {
    // One resolver for every provider: bounded in time, off libuv's thread pool (docs/operations.md#name-resolution).
    const lookup = new HostLookup({ timeoutMs: config.dnsTimeoutMs, servers: config.dnsServers });
    const adapters = new Map<string, ProviderAdapter>();
    for (const [i, spec] of catalog.listProviders().entries()) {
      adapters.set(spec.name, await createAdapter(spec, i, lookup));
    }
    return new ProviderRegistry(adapters, lookup);
  }

  /** Undefined for a provider that is not (or no longer) in the catalog. */
  find(provider: string): ProviderAdapter | undefined {
    return this.adapters.get(provider);
  }

  /**
   * After the workers drained (their beforeApplicationShutdown): the providers' connection pools close, and any
   * lookup of a name still under way ends.
   */
  async onApplicationShutdown(): Promise<void> {
    await Promise.allSettled([...this.adapters.values()].map(async (adapter) => adapter.close?.()));
    this.lookup.close();
  }

  adapter(provider: string): ProviderAdapter {
    const adapter = this.adapters.get(provider);
    if (!adapter) throw new Error(`no adapter for provider ${provider}`);
    return adapter;
  }
}

export const providerRegistryProvider = {
  provide: ProviderRegistry,
  inject: [CatalogService, appConfig.KEY],
  useFactory: (catalog: CatalogService, config: AppConfig) => ProviderRegistry.load(catalog, config),
};
