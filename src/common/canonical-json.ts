import * as crypto from 'node:crypto';
import { createHash } from 'node:crypto';

/**
 * Canonical JSON in the manner of RFC 8785: object keys sorted by UTF-16 code units, no insignificant
 * whitespace, numbers and strings as ECMAScript's JSON.stringify writes them. Only JSON values are
 * accepted: undefined members are dropped as JSON.stringify drops them; non-finite numbers throw.
 */
export function canonicalJson(value: unknown): string {
  if (value === null || typeof value === 'string' || typeof value === 'boolean') return JSON.stringify(value);
  if (typeof value === 'number') {
    if (!Number.isFinite(value)) throw new TypeError('canonical JSON has no representation for a non-finite number');
    return JSON.stringify(value);
  }
  if (Array.isArray(value)) return `[${value.map((item) => canonicalJson(item ?? null)).join(',')}]`;
  if (typeof value === 'object') {
    const members = Object.keys(value)
      .filter((key) => (value as Record<string, unknown>)[key] !== undefined)
      .sort()
      .map((key) => `${JSON.stringify(key)}:${canonicalJson((value as Record<string, unknown>)[key])}`);
    return `{${members.join(',')}}`;
  }
  throw new TypeError(`canonical JSON has no representation for a ${typeof value}`);
}

/** One-shot where Node has it (crypto.hash: no Hash object per call, a third of the cost on short texts). */
const oneShot = (crypto as { hash?: (algorithm: string, data: string, encoding: 'hex') => string }).hash;

export function sha256Hex(text: string): string {
  return oneShot ? oneShot('sha256', text, 'hex') : createHash('sha256').update(text).digest('hex');
}
