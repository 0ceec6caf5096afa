import { randomUUID } from 'node:crypto';
import { VersioningType } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { FastifyAdapter, type NestFastifyApplication } from '@nestjs/platform-fastify';
import { DocumentBuilder, SwaggerModule, type OpenAPIObject } from '@nestjs/swagger';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { Logger as NestPinoLogger, PinoLogger } from 'nestjs-pino';
import { AppModule } from './app.module.js';
import { DomainError, ValidationFailedError } from './common/domain.errors.js';
import { sendProblem } from './common/problem-details.filter.js';
import { runWithRequestId } from './common/request-context.js';
import { appConfig, type AppConfig } from './config/app.config.js';
import { parseEnv, type Env } from './config/env.js';
import { MetricsService } from './metrics/metrics.service.js';

const REQUEST_ID = /^[\x21-\x7e]{1,128}$/;
export const MAX_JSON_DEPTH = 64;

/** Deepest nesting of a parsed JSON body, without recursion (a hostile body must not blow the stack). */
export function jsonDepth(value: unknown): number {
  let deepest = 0;
  const stack: Array<[unknown, number]> = [[value, 1]];
  while (stack.length) {
    const [node, depth] = stack.pop()!;
    if (node === null || typeof node !== 'object') continue;
    deepest = Math.max(deepest, depth);
    if (deepest > MAX_JSON_DEPTH) return deepest;
    for (const child of Object.values(node)) stack.push([child, depth + 1]);
  }
  return deepest;
}

export function createAdapter(env: Pick<Env, 'bodyLimitBytes'>): FastifyAdapter {
  return new FastifyAdapter({
    bodyLimit: env.bodyLimitBytes,
    routerOptions: { maxParamLength: 200 },
    // Fastify refuses a malformed or over-long path before any Nest handler runs: answer problem+json too.
    frameworkErrors: (error: Error, request: FastifyRequest, reply: FastifyReply) =>
      sendProblem(request, reply, { status: 400, code: 'validation_failed', detail: 'The request path is malformed or too long.', errors: [{ field: 'path', message: error.message.replace(/'.*'/, 'the path') }] }),
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
    .addBearerAuth({ type: 'http', scheme: 'bearer', description: 'API key: `Authorization: Bearer <key>`' })
    .build();
  return SwaggerModule.createDocument(app, config, { operationIdFactory: (_controller, method) => method });
}

/** Everything a running app needs beyond its modules; main.ts and every test call this, so tests run the app users run. */
export async function configureApp(app: NestFastifyApplication): Promise<void> {
  app.enableVersioning({ type: VersioningType.URI });
  const fastify = app.getHttpAdapter().getInstance();
  const role = app.get<AppConfig | undefined>(appConfig.KEY, { strict: false })?.role;
  // First hook: what follows (guards, services, repositories) logs with the request id (common/request-context.ts).
  fastify.addHook('onRequest', (request, _reply, done) => runWithRequestId(request.id, done));
  fastify.addHook('onRequest', async (request, reply) => {
    void reply.header('X-Request-Id', request.id);
    // A worker process serves its probes and metrics, nothing of the API.
    if (role === 'worker' && !/^\/(health\/|metrics(\?|$))/.test(request.url)) {
      throw new DomainError('not_found', 404, 'This process runs ROLE=worker: it serves /health and /metrics only.');
    }
  });
  fastify.addHook('preValidation', async (request: FastifyRequest) => {
    if (request.body === undefined) return;
    if (!/^application\/(?:[\w.+-]+\+)?json\s*(?:;|$)/i.test(request.headers['content-type'] ?? '')) {
      throw new DomainError('unsupported_media_type', 415, 'Request bodies must be application/json.');
    }
    if (jsonDepth(request.body) > MAX_JSON_DEPTH) {
      throw new ValidationFailedError([{ field: 'body', message: `must not nest deeper than ${MAX_JSON_DEPTH} levels` }]);
    }
  });
  const metrics = app.get(MetricsService, { strict: false });
  // One JSON line per request: request id, method, path, route, status, latency. Headers (API keys) are never
  // logged; probes and scrapes are not logged at all.
  const requests = PinoLogger.root?.child({ context: 'http' });
  fastify.addHook('onResponse', async (request, reply) => {
    const route = request.routeOptions?.url;
    metrics.httpDuration.observe({ method: request.method, route: route ?? 'unmatched', status: String(reply.statusCode) }, reply.elapsedTime / 1000);
    if (route === '/health/live' || route === '/health/ready' || route === '/metrics') return;
    requests?.info(
      { requestId: request.id, req: { method: request.method, url: request.url.split('?')[0] }, route: route ?? null, status: reply.statusCode, latencyMs: Math.round(reply.elapsedTime * 10) / 10 },
      reply.statusCode >= 500 ? 'request failed' : 'request completed',
    );
  });
  SwaggerModule.setup('docs', app, () => buildOpenApiDocument(app), { jsonDocumentUrl: 'docs-json', yamlDocumentUrl: 'docs-yaml' });
}

export async function createApp(overrides: Partial<Env> = {}): Promise<NestFastifyApplication> {
  const env = { ...parseEnv(process.env), ...overrides };
  const app = await NestFactory.create<NestFastifyApplication>(AppModule.forRoot(overrides), createAdapter(env), {
    bufferLogs: true,
    abortOnError: false,
  });
  app.useLogger(app.get(NestPinoLogger));
  await configureApp(app);
  return app;
}
