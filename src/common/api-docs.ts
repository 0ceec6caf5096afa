import { applyDecorators, type Type } from '@nestjs/common';
import {
  ApiBearerAuth,
  ApiExtraModels,
  ApiHeader,
  ApiOperation,
  ApiResponse,
  getSchemaPath,
  type HeaderObject,
  type OpenAPIObject,
  type OperationObject,
  type ReferenceObject,
  type ResponseObject,
  type SchemaObject,
} from '@nestjs/swagger';

import type { ErrorCode } from './domain.errors.js';
import { EVENT_ID_PATTERN } from './event-ids.js';
import { PROBLEM_TITLES, RETRY_AFTER_SECONDS } from './problem-details.filter.js';

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
        properties: {
          field: { type: 'string' },
          message: { type: 'string' },
          code: {
            type: 'string',
            description: "Where one request holds many refusals (POST /v1/batches's items): this field's own code.",
          },
        },
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
  BatchLocation: {
    description: 'The path of the batch: `/v1/batches/{id}`.',
    required: true,
    schema: { type: 'string', pattern: '^/v1/batches/[0-9a-f-]{36}$' },
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
    description: "Sent with `provider_paused`: seconds until the provider's pause ends.",
    required: false,
    schema: { type: 'string', pattern: '^\\d+$', example: '30' },
  },
  WWWAuthenticate: {
    description: 'The authentication scheme: an API key or a JWT as a bearer token.',
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
export function ApiEndpoint(options: {
  operationId: string;
  summary: string;
  description?: string;
  problems: ProblemAnswer[];
}) {
  const problems = [...options.problems];
  if (!problems.some((p) => p.status === 401)) {
    problems.push(
      { status: 401, codes: ['unauthorized', 'key_revoked', 'token_expired'] },
      { status: 403, codes: ['forbidden'] },
    );
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

/**
 * A GET that answers JSON pages, or a live stream (docs/design.md#live-streams) to a client that asks for it with
 * `Accept: text/event-stream`: the one 200 carries both media types, and 204 says a stream has nothing more, ever.
 */
export function ApiJsonOrEventStream(model: Type, options: { json: string; stream: string; example: string }) {
  return applyDecorators(
    ApiExtraModels(model),
    ApiHeader({
      name: 'Last-Event-ID',
      required: false,
      description:
        'With `Accept: text/event-stream`: resume after this event id (EventSource sends it on reconnect), at most ' +
        '9223372036854775807. Checked on the JSON form too.',
      schema: { type: 'string', pattern: EVENT_ID_PATTERN },
    }),
    ApiResponse({
      status: 200,
      description: `${options.json} With \`Accept: text/event-stream\`: ${options.stream}`,
      content: {
        'application/json': { schema: { $ref: getSchemaPath(model) } },
        'text/event-stream': {
          schema: { type: 'string', description: 'Server-Sent Events: `id:`, `event:`, `data:` (JSON) per message.' },
          example: options.example,
        },
      },
    }),
    ApiResponse({
      status: 204,
      description: 'The stream is over: nothing follows Last-Event-ID, and nothing will (EventSource stops).',
    }),
  );
}

/** A probe or scrape: no credentials (an explicit empty `security`, so a reader knows it is on purpose). */
export function ApiPublicEndpoint(options: { operationId: string; summary: string }) {
  return ApiOperation({ operationId: options.operationId, summary: options.summary, security: [] });
}

/** What each code's `detail` typically says: Swagger UI shows these as the examples of each problem answer. */
const EXAMPLE_DETAILS: Record<ErrorCode, string> = {
  idempotency_key_missing: 'The Idempotency-Key header is required.',
  idempotency_key_invalid: 'The Idempotency-Key header must be 1-255 visible ASCII characters.',
  idempotency_key_reused: 'The key names a job with another intent; that job is unchanged.',
  attempt_in_progress: 'An attempt of this job is starting, running or unknown.',
  attempt_not_unknown: 'The attempt is succeeded, not unknown.',
  job_terminal: 'The job is succeeded.',
  validation_failed: 'The request is not valid.',
  unknown_operation: 'No operation is named translate.',
  unknown_provider: 'No provider is named sim-nonexistent.',
  provider_not_certified: 'sim-fallback holds no passing certification for summarize.',
  provider_paused: 'sim-primary is paused by its rate limit for 42 s.',
  webhook_disabled: 'The endpoint was disabled for failing; enable it first.',
  webhook_endpoint_limit: 'The owner has 20 webhook endpoints already.',
  webhook_rotation_limit: '5 rotated-out secrets still sign; rotate again when the oldest expires.',
  budget_exceeded: 'The monthly budget of 50 USD is reached until 2027-01-01T00:00:00Z.',
  not_found: 'No job 0193e0b2-7c51-7d7a-9a4e-5d3b1f0c2a11 of this owner.',
  unauthorized: 'A valid credential is required: Authorization: Bearer <API key or JWT>.',
  key_revoked: 'This API key was revoked.',
  token_expired: 'This token has expired.',
  forbidden: 'The key lacks the scope jobs:write.',
  payload_too_large: 'The body is larger than 1048576 bytes.',
  unsupported_media_type: 'The body must be application/json.',
  service_unavailable: 'The database is unavailable; retry after 2 s.',
  internal_error: 'An unexpected error occurred.',
};

const EXAMPLE_FIELD_ERRORS: Partial<Record<ErrorCode, Array<{ field: string; message: string }>>> = {
  validation_failed: [{ field: 'input.text', message: 'must NOT have fewer than 1 characters' }],
  idempotency_key_invalid: [{ field: 'Idempotency-Key', message: 'must be 1-255 visible ASCII characters' }],
};

/**
 * One example per code, as the filter writes it. Its `status` is set from the answer it stands under by
 * completeDocument (one code stands under several statuses: validation_failed under 400 and 422).
 */
function problemExamples(codes: string[]) {
  return Object.fromEntries(
    codes.map((code) => {
      const c = code as ErrorCode;
      const value = {
        type: `urn:onejob:problem:${c}`,
        title: PROBLEM_TITLES[c],
        status: 0,
        detail: EXAMPLE_DETAILS[c],
        instance: '/v1/jobs',
        code: c,
        requestId: '0193e0b2-8a40-7c3e-b1f2-4c6d8e0a1b23',
        ...(EXAMPLE_FIELD_ERRORS[c] ? { errors: EXAMPLE_FIELD_ERRORS[c] } : {}),
      };
      return [c, { summary: PROBLEM_TITLES[c], value }];
    }),
  );
}

export const problemResponse = (codes: string[]) => ({
  description: `problem+json with code ${codes.join(' | ')}`,
  content: {
    'application/problem+json': { ...problemContent['application/problem+json'], examples: problemExamples(codes) },
  },
});

/** `response` (an endpoint's own problem answer, or none) also naming `code`, with its example. */
function withCode(response: ResponseObject | undefined, code: ErrorCode): ResponseObject {
  if (!response) return problemResponse([code]);
  const media = response.content?.['application/problem+json'];
  if (!media || response.description.includes(code)) return response;
  response.description += ` | ${code}`;
  media.examples = { ...media.examples, ...problemExamples([code]) };
  return response;
}

const isReference = (value: unknown): value is ReferenceObject =>
  typeof value === 'object' && value !== null && '$ref' in value;

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
      responses['400'] = withCode(responses['400'], 'validation_failed');
      if (operation.requestBody) responses['422'] = withCode(responses['422'], 'validation_failed');
      if (!path.startsWith('/health/') && path !== '/metrics') {
        responses['503'] ??= problemResponse(['service_unavailable']);
      }
      responses['500'] ??= problemResponse(['internal_error']);
      for (const [status, response] of Object.entries(responses)) {
        for (const example of Object.values(response.content?.['application/problem+json']?.examples ?? {})) {
          if (!isReference(example) && example.value) example.value = { ...example.value, status: Number(status) };
        }
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
