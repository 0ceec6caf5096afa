import { canonicalJson, sha256Hex } from '../common/canonical-json.js';
import type { BatchCommand } from './batch-validation.js';

/**
 * What the batch's key binds (I10): every item's key and job fingerprint, in order, and the metadata: the SHA-256
 * of the canonical JSON of `{items: [[key, fingerprint], ...], metadata}`. An array of strings is canonical as
 * JSON.stringify writes it, so only the metadata goes through canonicalJson.
 */
export function batchFingerprint(command: BatchCommand, itemFingerprints: string[]): string {
  const items = JSON.stringify(command.items.map((item, i) => [item.key, itemFingerprints[i]]));
  return sha256Hex(`{"items":${items},"metadata":${canonicalJson(command.metadata)}}`);
}
