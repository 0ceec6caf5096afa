import { canonicalJson, sha256Hex } from './canonical-json.js';

export interface JobIntent {
  operation: string;
  input: unknown;
  /** As sent: an omitted chain is null, not the operation's default (DESIGN I2). */
  providers?: string[] | null;
}

/** SHA-256 of the canonical JSON of the intent: key order does not matter, a changed intent does. */
export function fingerprintOf(intent: JobIntent): string {
  return sha256Hex(
    canonicalJson({ operation: intent.operation, input: intent.input, providers: intent.providers ?? null }),
  );
}
