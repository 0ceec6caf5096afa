import type { OwnerMapping, ScopeMapping } from '../config/issuers.types.js';
import { isScope, type Scope } from './scopes.js';

const own = (value: object, key: string) => Object.prototype.hasOwnProperty.call(value, key);

/**
 * The claim at `path` (`sub`, `realm_access.roles`). A segment may itself hold dots where the token's key does:
 * `kubernetes.io.serviceaccount.name` is `payload["kubernetes.io"].serviceaccount.name`. Longer keys are tried
 * first, and a path that leads nowhere one way is tried the next.
 */
export function claimAt(payload: unknown, path: string): unknown {
  const walk = (value: unknown, parts: string[]): unknown => {
    if (!parts.length) return value;
    if (value === null || typeof value !== 'object' || Array.isArray(value)) return undefined;
    for (let n = parts.length; n >= 1; n--) {
      const key = parts.slice(0, n).join('.');
      if (!own(value, key)) continue;
      const found = walk((value as Record<string, unknown>)[key], parts.slice(n));
      if (found !== undefined) return found;
    }
    return undefined;
  };
  return walk(payload, path.split('.'));
}

const textOf = (value: unknown): string | undefined =>
  typeof value === 'string' ? value : typeof value === 'number' && Number.isFinite(value) ? String(value) : undefined;

/** Why a token maps to no owner: the claim its issuer's mapping names is missing or not text. */
export class UnmappedOwnerError extends Error {}

/** The owner a token's claims map to: a claim, or a template (`k8s-{{kubernetes.io.serviceaccount.name}}`). */
export function ownerOf(payload: unknown, mapping: OwnerMapping): string {
  const read = (path: string) => {
    const value = textOf(claimAt(payload, path.trim()));
    if (value === undefined || value === '') throw new UnmappedOwnerError(`the token has no text claim ${path.trim()}`);
    return value;
  };
  const owner =
    'claim' in mapping ? read(mapping.claim) : mapping.template.replace(/\{\{([^{}]+)\}\}/g, (_, path) => read(path));
  if (owner.length > 200) throw new UnmappedOwnerError('the owner the token maps to is longer than 200 characters');
  return owner;
}

/**
 * The onejob scopes a token's claims map to: a claim of scopes or groups (an array, or a space-separated string
 * as OAuth's `scope` is), each value through `map` (values it does not list give nothing), or, without `map`, the
 * values that are onejob scopes; or the issuer's static list. A token mapping to no scope authenticates and may
 * do nothing (403 on every route).
 */
export function scopesOf(payload: unknown, mapping: ScopeMapping): Scope[] {
  if ('static' in mapping) return mapping.static.filter(isScope);
  const raw = claimAt(payload, mapping.claim);
  const values =
    typeof raw === 'string'
      ? raw.split(/\s+/).filter(Boolean)
      : Array.isArray(raw)
        ? raw.filter((v): v is string => typeof v === 'string')
        : [];
  const found = new Set<Scope>();
  for (const value of values) {
    const mapped = mapping.map ? (own(mapping.map, value) ? mapping.map[value] : []) : [value];
    for (const scope of mapped) if (isScope(scope)) found.add(scope);
  }
  return [...found];
}
