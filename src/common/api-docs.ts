import { applyDecorators } from '@nestjs/common';
import {
  ApiBearerAuth,
  ApiOperation,
  ApiResponse,
  type HeaderObject,
  type OpenAPIObject,
  type OperationObject,
  type ReferenceObject,
  type ResponseObject,
  type SchemaObject,
} from '@nestjs/swagger';
import { RETRY_AFTER_SECONDS } from './problem-details.filter.js';

/** RFC 9457 problem+json as problem-details.filter.ts writes it (docs/errors.md). */
const problemSchema: SchemaObject = {
  type: 'object',
  required: ['type', 'title', 'status', 'detail', 'code', 'requestId'],
  properties: {
    type: { type: 'string', example: 'urn:onejob:problem:validation_failed' },
    title: { type: 'string' },
    status: { type: 'integer', minimum: 400, maximum: 599 },
    detail: { type: 'string' },
    instance: { type: 'string' },
    code: { type: 'string', description: 'Stable machine-readable code (docs/errors.md).' },
    requestId: { type: 'string', description: 'The X-Request-Id of the response.' },
    errors: {
      type: 'array',
      maxItems: 20,
      items: {
        type: 'object',
        required: ['field', 'message'],
        properties: { field: { type: 'string' }, message: { type: 'string' } },
        additionalProperties: false,
      },
    },
    errorsOmitted: { type: 'integer', description: 'Field errors found beyond the 20 listed in `errors`.' },
  },
  additionalProperties: false,
};

const VISIBLE_ASCII = '^[\\x21-\\x7e]+$';

/** Every response header the service sends, declared once and referenced where it is sent. */
const headers: Record<string, HeaderObject> = {
  XRequestId: {
    description:
      "The request's id: the caller's `X-Request-Id` when it is 1-128 visible ASCII characters, else a new uuid. " +
      'Sent on every response.',
    required: true,
    schema: { type: 'string', minLength: 1, maxLength: 128, pattern: VISIBLE_ASCII },
  },
  XContentTypeOptions: {
    description: 'Sent on every response: no answer is to be content-sniffed into another type.',
    required: true,
    schema: { type: 'string', enum: ['nosniff'] },
  },
  Location: {
    description: 'The path of the job: `/v1/jobs/{id}`.',
    required: true,
    schema: { type: 'string', pattern: '^/v1/jobs/[0-9a-f-]{36}$' },
  },
  IdempotentReplayed: {
    description: 'The key was already bound to this intent: this is the existing job, nothing was created.',
    required: true,
    schema: { type: 'string', enum: ['true'] },
  },
  PreferenceApplied: {
    description: 'Sent when the request asked `Prefer: wait=N`: the wait that was honoured (at most 30).',
    required: false,
    schema: { type: 'string', pattern: '^wait=\\d+$' },
  },
  RetryAfter: {
    description: 'Seconds to wait before retrying.',
    required: true,
    schema: { type: 'string', pattern: '^\\d+$', example: String(RETRY_AFTER_SECONDS) },
  },
  RetryAfterWhenPaused: {
    description: 'Sent with `provider_paused`: seconds until the provider\'s pause ends.',
    required: false,
    schema: { type: 'string', pattern: '^\\d+$', example: '30' },
  },
  WWWAuthenticate: {
    description: 'The authentication scheme: an API key as a bearer token.',
    required: true,
    schema: { type: 'string', enum: ['Bearer'] },
  },
};

export const headerRef = (name: keyof typeof headers): ReferenceObject => ({ $ref: `#/components/headers/${name}` });
const problemContent = { 'application/problem+json': { schema: { $ref: '#/components/schemas/Problem' } } };

export interface ProblemAnswer {
  status: number;
  codes: string[];
  /** Some of these codes come with a Retry-After (optional on the answer: the others do not). */
  retryAfterWhenPaused?: boolean;
}

/**
 * One decorator per endpoint: summary, operationId (the method name), auth, and every problem answer the endpoint
 * itself produces. Answers every endpoint shares (413/415 on a body, 500, 503) are added by completeDocument.
 */
export function ApiEndpoint(options: { operationId: string; summary: string; description?: string; problems: ProblemAnswer[] }) {
  const problems = [...options.problems];
  if (!problems.some((p) => p.status === 401)) {
    problems.push({ status: 401, codes: ['unauthorized'] }, { status: 403, codes: ['forbidden'] });
  }
  return applyDecorators(
    ApiOperation({ operationId: options.operationId, summary: options.summary, description: options.description }),
    ApiBearerAuth(),
    ...problems.map((problem) =>
      ApiResponse({
        status: problem.status,
        ...problemResponse(problem.codes),
        ...(problem.retryAfterWhenPaused ? { headers: { 'Retry-After': headerRef('RetryAfterWhenPaused') } } : {}),
      }),
    ),
  );
}

/** A probe or scrape: no credentials (an explicit empty `security`, so a reader knows it is on purpose). */
export function ApiPublicEndpoint(options: { operationId: string; summary: string }) {
  return ApiOperation({ operationId: options.operationId, summary: options.summary, security: [] });
}

export const problemResponse = (codes: string[]) => ({
  description: `problem+json with code ${codes.join(' | ')}`,
  content: problemContent,
});

const isReference = (value: unknown): value is ReferenceObject => typeof value === 'object' && value !== null && '$ref' in value;

/**
 * What holds for every operation because one hook or filter does it for all (app.setup.ts,
 * problem-details.filter.ts), written into the document in one place rather than on each endpoint.
 */
export function completeDocument(document: OpenAPIObject): OpenAPIObject {
  document.components = { ...document.components, headers: { ...document.components?.headers, ...headers } };
  document.components.schemas = { ...document.components.schemas, Problem: problemSchema };
  for (const [path, item] of Object.entries(document.paths)) {
    for (const method of ['get', 'post', 'put', 'patch', 'delete'] as const) {
      const operation: OperationObject | undefined = item[method];
      if (!operation) continue;
      const responses = operation.responses as Record<string, ResponseObject>;
      // Fastify parses any POST body before the handler: too large or not JSON is refused on every POST.
      if (method === 'post') {
        responses['413'] ??= problemResponse(['payload_too_large']);
        responses['415'] ??= problemResponse(['unsupported_media_type']);
      }
      // app.setup.ts refuses, on every operation, a query parameter it does not declare and a NUL or lone
      // surrogate in any parameter (400), and those in a body or a number JSON cannot write (422).
      responses['400'] ??= problemResponse(['validation_failed']);
      if (operation.requestBody) {
        const unprocessable = responses['422'];
        if (!unprocessable) responses['422'] = problemResponse(['validation_failed']);
        else if (!unprocessable.description.includes('validation_failed')) unprocessable.description += ' | validation_failed';
      }
      if (!path.startsWith('/health/') && path !== '/metrics') responses['503'] ??= problemResponse(['service_unavailable']);
      responses['500'] ??= problemResponse(['internal_error']);
      for (const [status, response] of Object.entries(responses)) {
        response.headers = {
          ...response.headers,
          'X-Request-Id': headerRef('XRequestId'),
          'X-Content-Type-Options': headerRef('XContentTypeOptions'),
        };
        if (status === '401') response.headers['WWW-Authenticate'] = headerRef('WWWAuthenticate');
        if (status === '503' || status === '429') response.headers['Retry-After'] = headerRef('RetryAfter');
      }
      // The ValidationPipe forbids unknown fields (forbidNonWhitelisted): every body schema is closed.
      const body = operation.requestBody;
      const schema = body && !isReference(body) ? body.content['application/json']?.schema : undefined;
      if (schema && isReference(schema)) {
        const component = document.components.schemas[schema.$ref.split('/').pop()!] as SchemaObject;
        component.additionalProperties = false;
      }
    }
  }
  return document;
}
