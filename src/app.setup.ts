import { randomUUID } from 'node:crypto';

import { VersioningType } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { FastifyAdapter, type NestFastifyApplication } from '@nestjs/platform-fastify';
import { DocumentBuilder, type OpenAPIObject, SwaggerModule } from '@nestjs/swagger';
import type { FastifyReply, FastifyRequest, RawServerDefault } from 'fastify';

import { AppModule } from './app.module.js';
import { BatchAdmission } from './batches/batch-admission.js';
import { completeDocument } from './common/api-docs.js';
import { DomainError, type FieldError, ValidationFailedError } from './common/domain.errors.js';
import {
  exceedsJsonLimits,
  inspectJson,
  MAX_BATCH_JSON_MEMBERS,
  MAX_JSON_DEPTH,
  MAX_JSON_MEMBERS,
} from './common/json-text.js';
import { AppLogger } from './common/logging.module.js';
import { sendProblem, writeParserProblem } from './common/problem-details.filter.js';
import { declaredQueryParameters, unknownQueryErrors, unstorableParameterErrors } from './common/query-params.js';
import { type AppConfig, appConfig } from './config/app.config.js';
import { type Env, parseEnv } from './config/env.js';
import { serveConsole } from './console/console.static.js';
import { runWithRequestId } from './database/request-context.js';
import { MetricsService } from './metrics/metrics.service.js';

const REQUEST_ID = /^[\x21-\x7e]{1,128}$/;
/** Swagger UI's page and assets (not the documents at /docs-json and /docs-yaml). */
const DOCS_PAGE = /^\/docs(?:[/?]|$)/;
/**
 * Swagger UI loads only its own scripts and styles from here; it needs inline styles (a <style> block and React's
 * style attributes) and data: images. Nothing may frame it: a framed "Try it out" is a clickjacking surface.
 */
const DOCS_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self' 'unsafe-inline'",
  "img-src 'self' data:",
  "font-src 'self' data:",
  "connect-src 'self'",
  "form-action 'none'",
  "frame-ancestors 'none'",
  "base-uri 'none'",
].join('; ');
export { MAX_JSON_DEPTH } from './common/json-text.js';
const PROTOTYPE_MEMBERS = new Set(Object.getOwnPropertyNames(Object.prototype));
const UTF8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: false });

const limitError = (limit: 'depth' | 'members', maxMembers = MAX_JSON_MEMBERS): FieldError =>
  limit === 'depth'
    ? { field: 'body', message: `must not nest deeper than ${MAX_JSON_DEPTH} levels` }
    : { field: 'body', message: `must not have more than ${maxMembers} members in all` };

/** The batch create's route: its own body limit (BATCH_BODY_LIMIT_BYTES) and member bound (MAX_BATCH_JSON_MEMBERS). */
const BATCH_ROUTE = /^\/v1\/batches\/?$/;
const isBatchCreate = (method: string | string[], url: string | undefined) =>
  (Array.isArray(method) ? method.includes('POST') : method === 'POST') && url !== undefined && BATCH_ROUTE.test(url);
const maxMembersOf = (request: FastifyRequest) =>
  isBatchCreate(request.method, request.routeOptions?.url) ? MAX_BATCH_JSON_MEMBERS : MAX_JSON_MEMBERS;

/**
 * class-validator looks a member's metadata up in a plain object, so a member named `constructor` or `toString`
 * finds Object.prototype's and passes as known: these names are refused here, like any other unknown member.
 */
function prototypeMemberErrors(value: unknown, where: string): FieldError[] {
  if (value === null || typeof value !== 'object') return [];
  return Object.keys(value)
    .filter((key) => PROTOTYPE_MEMBERS.has(key))
    .map((key) => ({ field: key, message: `is not a known ${where}` }));
}

export function createAdapter(env: Pick<Env, 'bodyLimitBytes'>): FastifyAdapter {
  return new FastifyAdapter({
    bodyLimit: env.bodyLimitBytes,
    routerOptions: { maxParamLength: 200 },
    // Node's HTTP parser refuses a NUL in a header or a broken chunk before Fastify sees a request.
    clientErrorHandler: writeParserProblem,
    // Fastify refuses a malformed or over-long path before any Nest handler runs: answer problem+json too.
    frameworkErrors: (error: Error, request: FastifyRequest, reply: FastifyReply) =>
      sendProblem(request, reply, {
        status: 400,
        code: 'validation_failed',
        detail: 'The request path is malformed or too long.',
        errors: [{ field: 'path', message: error.message.replace(/'.*'/, 'the path') }],
      }),
    // Accept the caller's X-Request-Id when it is sane, otherwise make one.
    genReqId: (request: { headers: Record<string, string | string[] | undefined> }) => {
      const header = request.headers['x-request-id'];
      return typeof header === 'string' && REQUEST_ID.test(header) ? header : randomUUID();
    },
  });
}

export function buildOpenApiDocument(app: NestFastifyApplication): OpenAPIObject {
  const config = new DocumentBuilder()
    .setTitle('onejob')
    .setDescription(
      'One job per intent: idempotent job creation, attempts under a stable job, compare-and-swap settlement. ' +
        'Every error is RFC 9457 application/problem+json with a stable `code`.',
    )
    .setVersion('1')
    // Relative: the paths are served by the origin this document came from (GET /docs-json), any deployment.
    .addServer('/', 'The service that serves this document')
    .addBearerAuth({
      type: 'http',
      scheme: 'bearer',
      bearerFormat: 'API key (oj_…) or JWT',
      description:
        '`Authorization: Bearer <credential>`: an API key (`oj_…`, `npm run apikey`), or a JWT of an issuer in ' +
        "AUTH_ISSUERS_FILE (your IdP's access token, a Kubernetes projected service-account token), mapped to an " +
        'owner and scopes (docs/operations.md#tokens-from-your-identity-provider). The stream routes also take a ' +
        'stream token as `?access_token=` (see `streamToken`).',
    })
    .addSecurity('streamToken', {
      type: 'apiKey',
      in: 'query',
      name: 'access_token',
      description:
        'A stream token (POST /v1/jobs/{id}/stream-tokens, POST /v1/batches/{id}/stream-tokens): opens that one ' +
        'stream with `Accept: text/event-stream`, for at most 15 minutes; refused everywhere else.',
    })
    .build();
  return completeDocument(
    SwaggerModule.createDocument(app, config, { operationIdFactory: (_controller, method) => method }),
  );
}

/**
 * Everything a running app needs beyond its modules; main.ts and every test call this, so tests run the app users
 * run.
 */
export async function configureApp(app: NestFastifyApplication): Promise<void> {
  app.enableVersioning({ type: VersioningType.URI });
  const fastify = app.getHttpAdapter().getInstance();
  const config = app.get<AppConfig | undefined>(appConfig.KEY, { strict: false });
  const role = config?.role;
  // Set before the routes are: Fastify reads a route's bodyLimit when it registers it.
  const batchBodyLimit = config?.batchBodyLimitBytes;
  if (batchBodyLimit) {
    fastify.addHook('onRoute', (route) => {
      if (isBatchCreate(route.method, route.url)) route.bodyLimit = batchBodyLimit;
    });
  }
  // First hook: what follows (guards, services, repositories) logs with the request id (database/request-context.ts).
  fastify.addHook('onRequest', (request, _reply, done) => runWithRequestId(request.id, done));
  fastify.addHook('onRequest', async (request, reply) => {
    void reply.header('X-Request-Id', request.id);
    // No answer of ours is to be read as anything but its declared type (a JSON body sniffed as HTML is an XSS).
    void reply.header('X-Content-Type-Options', 'nosniff');
    if (DOCS_PAGE.test(request.url)) void reply.header('Content-Security-Policy', DOCS_CSP);
    // A worker process serves its probes and metrics, nothing of the API.
    if (role === 'worker' && !/^\/(health\/|metrics(\?|$))/.test(request.url)) {
      throw new DomainError('not_found', 404, 'This process runs ROLE=worker: it serves /health and /metrics only.');
    }
  });
  // A batch create takes its process slot before its body (up to BATCH_BODY_LIMIT_BYTES) is read and parsed, and
  // gives it back when its response ends, however it ends (batches/batch-admission.ts).
  const admission = app.get(BatchAdmission, { strict: false });
  if (admission) {
    fastify.addHook('onRequest', async (request, reply) => {
      if (!isBatchCreate(request.method, request.routeOptions?.url)) return;
      reply.raw.once('close', admission.admitRequest());
    });
  }
  // The default JSON parser decodes with replacement characters: invalid UTF-8 would be stored as U+FFFD.
  const parseJsonText = fastify.getDefaultJsonParser('error', 'error');
  const bodyLimit = fastify.initialConfig.bodyLimit;
  app.useBodyParser<RawServerDefault>('application/json', { bodyLimit }, (request, body, done) => {
    const charset = /;\s*charset\s*=\s*"?([^";\s]+)/i.exec(request.headers['content-type'] ?? '')?.[1];
    if (charset && !/^utf-?8$/i.test(charset)) {
      return done(new ValidationFailedError([{ field: 'Content-Type', message: 'charset must be utf-8' }]), undefined);
    }
    let text: string;
    try {
      text = UTF8.decode(body);
    } catch {
      return done(new ValidationFailedError([{ field: 'body', message: 'is not valid UTF-8' }]), undefined);
    }
    const maxMembers = maxMembersOf(request as unknown as FastifyRequest);
    const exceeded = exceedsJsonLimits(text, maxMembers);
    if (exceeded) return done(new ValidationFailedError([limitError(exceeded, maxMembers)]), undefined);
    // Answers through `done` (its type also allows a promise, which this parser never returns).
    void parseJsonText(request, text, done);
  });
  // One document, built on first use (the modules are initialised by then) and shared with /docs.
  let document: OpenAPIObject | undefined;
  const documentOf = () => (document ??= buildOpenApiDocument(app));
  let declaredQueries: Map<string, Set<string>> | undefined;
  fastify.addHook('preValidation', async (request: FastifyRequest) => {
    const queryErrors = prototypeMemberErrors(request.query, 'query parameter');
    if (queryErrors.length) throw new ValidationFailedError(queryErrors);
    declaredQueries ??= declaredQueryParameters(documentOf());
    const parameterErrors = [
      ...unknownQueryErrors(declaredQueries, request.method, request.routeOptions?.url, request.query),
      ...unstorableParameterErrors(request.query),
      ...unstorableParameterErrors(request.params),
    ];
    if (parameterErrors.length) throw new ValidationFailedError(parameterErrors);
    if (request.body === undefined) return;
    if (!/^application\/(?:[\w.+-]+\+)?json\s*(?:;|$)/i.test(request.headers['content-type'] ?? '')) {
      throw new DomainError('unsupported_media_type', 415, 'Request bodies must be application/json.');
    }
    // Cheap checks first, in one pass: the DTO validation after them is linear in the members it refuses.
    const maxMembers = maxMembersOf(request);
    const shape = inspectJson(request.body, '', { maxMembers });
    if (shape.depth > MAX_JSON_DEPTH) throw new ValidationFailedError([limitError('depth')]);
    if (shape.members > maxMembers) throw new ValidationFailedError([limitError('members', maxMembers)]);
    const memberErrors = prototypeMemberErrors(request.body, 'field');
    if (memberErrors.length) throw new ValidationFailedError(memberErrors);
    if (shape.unstorable.length) throw new ValidationFailedError(shape.unstorable, 422);
  });
  const metrics = app.get(MetricsService, { strict: false });
  // One JSON line per request: request id, method, path, route, status, latency. Headers (API keys) are never
  // logged; probes and scrapes are not logged at all.
  // In preview mode (openapi.cli) providers are not constructed: no logger, no request lines.
  const requests = app.get(AppLogger, { strict: false })?.pino?.child({ context: 'http' });
  fastify.addHook('onResponse', async (request, reply) => {
    const route = request.routeOptions?.url;
    metrics.httpDuration.observe(
      { method: request.method, route: route ?? 'unmatched', status: String(reply.statusCode) },
      reply.elapsedTime / 1000,
    );
    if (route === '/health/live' || route === '/health/ready' || route === '/metrics') return;
    requests?.info(
      {
        requestId: request.id,
        req: { method: request.method, url: request.url.split('?')[0] },
        route: route ?? null,
        status: reply.statusCode,
        latencyMs: Math.round(reply.elapsedTime * 10) / 10,
      },
      reply.statusCode >= 500 ? 'request failed' : 'request completed',
    );
  });
  serveConsole(app);
  SwaggerModule.setup('docs', app, documentOf, { jsonDocumentUrl: 'docs-json', yamlDocumentUrl: 'docs-yaml' });
}

export async function createApp(overrides: Partial<Env> = {}): Promise<NestFastifyApplication> {
  const env = { ...parseEnv(process.env), ...overrides };
  const app = await NestFactory.create<NestFastifyApplication>(AppModule.forRoot(overrides), createAdapter(env), {
    bufferLogs: true,
    abortOnError: false,
  });
  app.useLogger(app.get(AppLogger));
  await configureApp(app);
  return app;
}
