import type { FieldError } from './domain.errors.js';

export const MAX_JSON_DEPTH = 64;
/**
 * Object members in one body, all levels counted. Every refusal of an unknown member costs class-validator an
 * error object, so a 1 MB body of 90k keys cost seconds of CPU; counting them first costs microseconds.
 */
export const MAX_JSON_MEMBERS = 2_000;
/**
 * The same bound for a batch's body (POST /v1/batches): 50 members per item of a full batch. Its items are checked
 * by a validator of its own (batches/batch-validation.ts), whose cost per member is a Set lookup, not an error object.
 */
export const MAX_BATCH_JSON_MEMBERS = 500_000;

/** PostgreSQL's jsonb and text types store neither NUL nor a lone UTF-16 surrogate (no UTF-8 encoding exists). */
export function isStorableText(text: string): boolean {
  return !text.includes('\0') && (text as string & { isWellFormed(): boolean }).isWellFormed();
}

const UNSTORABLE_TEXT = 'contains NUL or an unpaired surrogate, which cannot be stored';
const UNSTORABLE_NAME = 'has a member name with NUL or an unpaired surrogate, which cannot be stored';

export interface JsonShape {
  /** Deepest nesting seen; the walk stops past MAX_JSON_DEPTH. */
  depth: number;
  /** Object members seen; the walk stops past MAX_JSON_MEMBERS. */
  members: number;
  /** Strings PostgreSQL cannot store and numbers JSON cannot write (1e400 parses to Infinity). */
  unstorable: FieldError[];
}

const childPath = (parent: string, key: string | number) =>
  typeof key === 'number' ? `${parent}[${key}]` : parent ? `${parent}.${key}` : key;

/**
 * One pass over a parsed JSON value, without recursion (a hostile body must not blow the stack): its depth,
 * its width, and the values that would fail later, deep inside the database driver or the fingerprint.
 * Field paths are written as the validation errors write them: `input.tags[1]`.
 */
export function inspectJson(
  value: unknown,
  root = '',
  { stopAtLimits = true, maxMembers = MAX_JSON_MEMBERS } = {},
): JsonShape {
  const shape: JsonShape = { depth: 0, members: 0, unstorable: [] };
  const stack: Array<[unknown, number, string]> = [[value, 1, root]];
  while (stack.length) {
    const [node, depth, path] = stack.pop()!;
    if (typeof node === 'string') {
      if (!isStorableText(node)) shape.unstorable.push({ field: path || 'body', message: UNSTORABLE_TEXT });
      continue;
    }
    if (typeof node === 'number') {
      if (!Number.isFinite(node)) shape.unstorable.push({ field: path || 'body', message: 'must be a finite number' });
      continue;
    }
    if (node === null || typeof node !== 'object') continue;
    shape.depth = Math.max(shape.depth, depth);
    if (stopAtLimits && shape.depth > MAX_JSON_DEPTH) return shape;
    if (Array.isArray(node)) {
      for (let i = node.length - 1; i >= 0; i--) stack.push([node[i], depth + 1, childPath(path, i)]);
      continue;
    }
    const keys = Object.keys(node);
    shape.members += keys.length;
    if (stopAtLimits && shape.members > maxMembers) return shape;
    for (let i = keys.length - 1; i >= 0; i--) {
      const key = keys[i];
      if (!isStorableText(key)) {
        shape.unstorable.push({ field: path || 'body', message: UNSTORABLE_NAME });
        continue;
      }
      stack.push([(node as Record<string, unknown>)[key], depth + 1, childPath(path, key)]);
    }
  }
  return shape;
}

/**
 * Counts object members and nesting in JSON text without parsing it, stopping at the first limit passed.
 * JSON.parse of 90k members costs ~100 ms of CPU before any check could run on the result; this scan costs
 * a few milliseconds per megabyte. Malformed text is left for the parser to refuse.
 */
export function exceedsJsonLimits(text: string, maxMembers = MAX_JSON_MEMBERS): 'depth' | 'members' | undefined {
  let depth = 0;
  let members = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c) {
        i++;
      } // backslash: skip the escaped character
      else if (c === 0x22) inString = false;
      continue;
    }
    if (c === 0x22) inString = true;
    else if (c === 0x3a && ++members > maxMembers) {
      return 'members';
    } // ':' ends a member name
    else if ((c === 0x7b || c === 0x5b) && ++depth > MAX_JSON_DEPTH) return 'depth';
    else if (c === 0x7d || c === 0x5d) depth--;
  }
  return undefined;
}
