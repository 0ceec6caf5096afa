import { readFileSync } from 'node:fs';

import { Ajv, type ValidateFunction } from 'ajv';
import addFormatsModule from 'ajv-formats';

/**
 * Checks a response the service sent against the committed openapi.json: the status is documented for the
 * operation, the media type is one it documents, the body matches its schema, every required header is there,
 * every header present matches its schema, and no header of the API's own is sent where it is not declared.
 *
 * Ajv (already the service's JSON Schema validator) against the document itself: the OpenAPI response validators
 * compared (openapi-backend, openapi-response-validator) validate only `application/json` bodies, so every
 * problem+json answer would have passed unchecked, and they ignore a header's `required`.
 */

interface HeaderObject {
  required?: boolean;
  schema: object;
}
interface ResponseObject {
  headers?: Record<string, HeaderObject | { $ref: string }>;
  content?: Record<string, { schema: object }>;
}
interface OperationObject {
  operationId: string;
  responses: Record<string, ResponseObject>;
}
export interface OpenApiDocument {
  paths: Record<string, Record<string, OperationObject>>;
  components: { headers?: Record<string, HeaderObject>; schemas?: Record<string, object> };
}

export interface ObservedResponse {
  method: string;
  /** The Fastify route (`/v1/jobs/:id`), undefined when no route matched. */
  route: string | undefined;
  url: string;
  status: number;
  headers: Record<string, unknown>;
  body: string | undefined;
}

/** Headers this API defines: sending one where the document does not declare it is drift. */
const API_HEADERS = [
  'location',
  'idempotent-replayed',
  'preference-applied',
  'retry-after',
  'www-authenticate',
  'x-request-id',
];
/** Served by Swagger UI: the document itself, not an operation of it. */
/** Not API: Swagger's own pages and the console's static assets. */
const UNDOCUMENTED_ROUTES = /^\/(docs(-json|-yaml)?|console)(\/|$)/;

const addFormats = addFormatsModule as unknown as (ajv: Ajv) => Ajv;
const pointer = (...tokens: string[]) => tokens.map((t) => `/${t.replace(/~/g, '~0').replace(/\//g, '~1')}`).join('');
const mediaType = (value: unknown) =>
  String(value ?? '')
    .split(';')[0]
    .trim()
    .toLowerCase();

/**
 * A response that carries a field the document does not name is drift too. Without changing what clients may
 * accept (the document leaves objects open for additive change), the check closes every object schema that lists
 * its properties and says nothing of others.
 */
function closeObjects(node: unknown): void {
  if (Array.isArray(node)) return node.forEach(closeObjects);
  if (node === null || typeof node !== 'object') return;
  const schema = node as Record<string, unknown>;
  if (schema.type === 'object' && typeof schema.properties === 'object' && schema.additionalProperties === undefined) {
    schema.additionalProperties = false;
  }
  Object.values(schema).forEach(closeObjects);
}

export class OpenApiContract {
  private readonly ajv: Ajv;
  private readonly document: OpenApiDocument;
  private readonly validators = new Map<string, ValidateFunction>();

  constructor(document: OpenApiDocument = JSON.parse(readFileSync('openapi.json', 'utf8'))) {
    this.document = structuredClone(document);
    closeObjects(this.document);
    this.ajv = addFormats(new Ajv({ allErrors: true, strict: true, validateSchema: false }));
    // The document's own fields (paths, components...) are not schema keywords; the schemas inside are compiled
    // strictly, from where $refs point.
    for (const keyword of ['example', ...Object.keys(this.document)]) this.ajv.addKeyword(keyword);
    this.ajv.addSchema(this.document as object, 'openapi.json');
  }

  /** Every way the response departs from the document; empty when it conforms. */
  check(response: ObservedResponse): string[] {
    if (response.route && UNDOCUMENTED_ROUTES.test(response.route)) return [];
    const path = response.route?.replace(/:(\w+)/g, '{$1}');
    const method = response.method.toLowerCase();
    const operation = path ? this.document.paths[path]?.[method] : undefined;
    if (!operation) {
      // No route: Fastify's 404 (and 405) must still be a problem+json of the document's shape.
      if (response.route) return [`${method.toUpperCase()} ${path} is not in the document`];
      return this.checkBody(response, '#/components/schemas/Problem', 'application/problem+json', [
        'application/problem+json',
      ]);
    }
    const status = String(response.status);
    const documented = operation.responses[status];
    if (!documented) return [`status ${status} is not documented for ${operation.operationId}`];
    const violations = this.checkHeaders(response, documented);
    const content = documented.content ?? {};
    const type = mediaType(response.headers['content-type']);
    if (!Object.keys(content).length) {
      if (response.body) violations.push(`a body was sent where ${operation.operationId} ${status} documents none`);
      return violations;
    }
    if (!content[type]) {
      return [...violations, `content-type ${type || '(none)'} is not one of ${Object.keys(content).join(', ')}`];
    }
    const ref = `openapi.json#${pointer('paths', path!, method, 'responses', status, 'content', type, 'schema')}`;
    return [...violations, ...this.checkBody(response, ref, type, Object.keys(content))];
  }

  private checkHeaders(response: ObservedResponse, documented: ResponseObject): string[] {
    const violations: string[] = [];
    const declared = new Map<string, HeaderObject>();
    for (const [name, header] of Object.entries(documented.headers ?? {})) {
      const resolved = '$ref' in header ? this.document.components.headers![header.$ref.split('/').pop()!] : header;
      declared.set(name.toLowerCase(), resolved);
    }
    for (const [name, header] of declared) {
      const value = response.headers[name];
      if (value === undefined) {
        if (header.required) violations.push(`required header ${name} is missing`);
        continue;
      }
      const validate = this.ajv.compile(header.schema);
      if (!validate(String(value))) violations.push(`header ${name}: ${this.ajv.errorsText(validate.errors)}`);
    }
    for (const name of API_HEADERS) {
      if (response.headers[name] !== undefined && !declared.has(name)) {
        violations.push(`header ${name} is sent but not declared`);
      }
    }
    return violations;
  }

  private checkBody(response: ObservedResponse, ref: string, type: string, allowed: string[]): string[] {
    if (!allowed.includes(type)) return [`content-type ${type || '(none)'} is not one of ${allowed.join(', ')}`];
    // A live stream's body is a stream, not text this hook sees: its messages are checked by the stream tests.
    if (type === 'text/event-stream') return [];
    let body: unknown = response.body;
    if (type.endsWith('json')) {
      try {
        body = JSON.parse(response.body ?? '');
      } catch {
        return [`the ${type} body is not JSON`];
      }
    }
    let validate = this.validators.get(ref);
    if (!validate) {
      validate = ref.startsWith('#')
        ? this.ajv.compile({ $ref: `openapi.json${ref}` })
        : this.ajv.compile({ $ref: ref });
      this.validators.set(ref, validate);
    }
    return validate(body) ? [] : [`body: ${this.ajv.errorsText(validate.errors, { separator: '; ' })}`];
  }
}

/** One line per departure, naming the request, for a test failure message. */
export const describeViolations = (response: ObservedResponse, violations: string[]) =>
  `${response.method} ${response.url} answered ${response.status}, which breaks openapi.json:\n  - ${violations.join('\n  - ')}`;
