import { encodingForModel, getEncoding, type Tiktoken, type TiktokenModel } from 'js-tiktoken';
import type { RenderedPrompt } from './provider.port.js';

const encoders = new Map<string, Tiktoken>();

function encoderFor(model: string): Tiktoken {
  let encoder = encoders.get(model);
  if (!encoder) {
    try {
      encoder = encodingForModel(model as TiktokenModel);
    } catch {
      // Unknown to js-tiktoken (a self-hosted OpenAI-compatible model): the current OpenAI encoding.
      encoder = getEncoding('o200k_base');
    }
    encoders.set(model, encoder);
  }
  return encoder;
}

/** Chat framing per message, as OpenAI documents it for its chat models. */
const PER_MESSAGE = 3;
const PER_REPLY = 3;

export function countOpenAiTokens(model: string, prompt: RenderedPrompt): number {
  const encoder = encoderFor(model);
  const messages = [prompt.system, prompt.user].filter((m): m is string => m !== undefined);
  return messages.reduce((n, text) => n + PER_MESSAGE + encoder.encode(text).length, PER_REPLY);
}

/**
 * For providers whose tokenizer is not published as a package (Anthropic, simulated): one token per three
 * UTF-8 bytes, rounded up, plus framing. Deliberately pessimistic (English averages about four bytes a token),
 * so a prompt that passes this check fits.
 */
export function estimateTokens(prompt: RenderedPrompt): number {
  const messages = [prompt.system, prompt.user].filter((m): m is string => m !== undefined);
  return messages.reduce((n, text) => n + PER_MESSAGE + Math.ceil(Buffer.byteLength(text, 'utf8') / 3), PER_REPLY);
}
