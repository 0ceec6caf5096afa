import { canonicalJson, sha256Hex } from '../common/canonical-json.js';
import type { OperationSpec, ProviderSpec } from '../config/catalog.types.js';
import { contractDigest } from './certification.service.js';

const operation = {
  name: 'summarize',
  prompt: 'Summarize {{text}}',
  inputSchema: { type: 'object' },
  outputSchema: { type: 'object' },
  temperature: 0,
  maxTokens: 100,
} as unknown as OperationSpec;
const provider = { name: 'p', kind: 'openai', model: 'gpt-4o-mini' } as unknown as ProviderSpec;

describe('contractDigest', () => {
  it('changes when a provider moves from Chat Completions to the Responses API: its certification is void', () => {
    expect(contractDigest(operation, { ...provider, api: 'responses' })).not.toBe(contractDigest(operation, provider));
  });

  it('keeps the digest of a provider on the default API (`chat`, said or not) as it was before `api` existed', () => {
    expect(contractDigest(operation, { ...provider, api: 'chat' })).toBe(contractDigest(operation, provider));
    // The digest as it was computed before `api` was part of it: certifications stored then stay valid.
    const before = sha256Hex(
      canonicalJson({
        prompt: operation.prompt,
        inputSchema: operation.inputSchema,
        outputSchema: operation.outputSchema,
        temperature: operation.temperature,
        maxTokens: operation.maxTokens,
        model: provider.model,
      }),
    );
    expect(contractDigest(operation, provider)).toBe(before);
  });

  it('changes with the model behind the name', () => {
    expect(contractDigest(operation, { ...provider, model: 'gpt-4o' })).not.toBe(contractDigest(operation, provider));
  });
});
