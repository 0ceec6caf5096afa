import type { OpenAPIObject, ParameterObject } from '@nestjs/swagger';

import type { FieldError } from './domain.errors.js';
import { isStorableText } from './json-text.js';

const METHODS = ['get', 'post', 'put', 'patch', 'delete'] as const;

/**
 * The query parameters each operation of the document declares, by `METHOD /fastify/:route`. The document is
 * built from the @Query DTOs (and every other decorator), so this is the service's own list: a parameter it does
 * not name is one no handler reads, and answering 400 says so instead of silently ignoring it (docs/errors.md).
 */
export function declaredQueryParameters(document: OpenAPIObject): Map<string, Set<string>> {
  const declared = new Map<string, Set<string>>();
  for (const [path, item] of Object.entries(document.paths)) {
    const route = path.replace(/\{(\w+)\}/g, ':$1');
    for (const method of METHODS) {
      const operation = item[method];
      if (!operation) continue;
      const names = (operation.parameters ?? [])
        .filter((p): p is ParameterObject => 'in' in p && p.in === 'query')
        .map((p) => p.name);
      declared.set(`${method.toUpperCase()} ${route}`, new Set(names));
    }
  }
  return declared;
}

/** Names in `query` the operation does not declare; none for a route that is not an operation of the document. */
export function unknownQueryErrors(
  declared: Map<string, Set<string>>,
  method: string,
  route: string | undefined,
  query: unknown,
): FieldError[] {
  const names = route && declared.get(`${method === 'HEAD' ? 'GET' : method} ${route}`);
  if (!names || query === null || typeof query !== 'object') return [];
  return Object.keys(query)
    .filter((name) => !names.has(name))
    .map((name) => ({ field: name, message: 'is not a query parameter of this operation' }));
}

/**
 * Query and path values PostgreSQL's text cannot hold (NUL, a lone surrogate): refused here for every parameter
 * of every route, as the body's strings are, rather than by a rule on each DTO field that one new field forgets.
 */
export function unstorableParameterErrors(values: unknown): FieldError[] {
  if (values === null || typeof values !== 'object') return [];
  return Object.entries(values).flatMap(([name, value]) => {
    const texts = Array.isArray(value) ? value : [value];
    return texts.some((text) => typeof text === 'string' && !isStorableText(text))
      ? [{ field: name, message: 'contains NUL or an unpaired surrogate, which cannot be stored' }]
      : [];
  });
}
