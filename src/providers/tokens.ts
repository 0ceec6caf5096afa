import type { RenderedPrompt } from './provider.port.js';

/** Chat framing per message, as OpenAI documents it for its chat models. */
export const PER_MESSAGE = 3;
export const PER_REPLY = 3;

/**
 * For providers whose tokenizer is not published as a package (Anthropic, simulated): one token per three
 * UTF-8 bytes, rounded up, plus framing. Deliberately pessimistic (English averages about four bytes a token),
 * so a prompt that passes this check fits.
 */
export function estimateTokens(prompt: RenderedPrompt): number {
  const messages = [prompt.system, prompt.user].filter((m): m is string => m !== undefined);
  return messages.reduce((n, text) => n + PER_MESSAGE + Math.ceil(Buffer.byteLength(text, 'utf8') / 3), PER_REPLY);
}
