import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

import type { NestFastifyApplication } from '@nestjs/platform-fastify';
import type { FastifyReply } from 'fastify';

import { JwtVerifier } from '../auth/jwt-verifier.js';

const PAGE_DIR = fileURLToPath(new URL('./static/', import.meta.url));

/**
 * Where the charting library is: copied beside the page by the build (no CDN: the console loads nothing from
 * outside the service), or read from node_modules when the app runs from its sources (tests).
 */
function vendorDir(): string | undefined {
  if (existsSync(`${PAGE_DIR}vendor/`)) return undefined;
  return `${dirname(createRequire(import.meta.url).resolve('uplot'))}/`;
}

/**
 * Nothing but the service itself: scripts, styles, images and API calls go to this origin only; where the console
 * signs in with an identity provider, its calls may also reach that provider's origins (the token endpoint, for
 * the code exchange), and nothing else.
 */
const csp = (signInOrigins: Iterable<string>) =>
  [
    "default-src 'none'",
    "script-src 'self'",
    "style-src 'self'",
    "img-src 'self' data:",
    ["connect-src 'self'", ...signInOrigins].join(' '),
    "form-action 'none'",
    "frame-ancestors 'none'",
    "base-uri 'none'",
  ].join('; ');

const originOf = (url: string | null | undefined) => {
  try {
    return url ? new URL(url).origin : undefined;
  } catch {
    return undefined;
  }
};

type SignInConfig =
  | {
      issuer: string;
      clientId: string;
      scope: string;
      authorizationEndpoint: string | null;
      tokenEndpoint: string | null;
    }
  | { error: string }
  | null;

/** What the console needs to sign in (GET /console/config.json): null where no issuer has `console`. */
async function signInConfig(verifier: JwtVerifier | undefined): Promise<SignInConfig> {
  try {
    const found = await verifier?.consoleIssuer();
    if (!found) return null;
    const { spec, endpoints } = found;
    return {
      issuer: spec.issuer,
      clientId: spec.console!.clientId,
      scope: spec.console!.scope,
      authorizationEndpoint: endpoints.authorizationEndpoint ?? null,
      tokenEndpoint: endpoints.tokenEndpoint ?? null,
    };
  } catch {
    return { error: 'the identity provider could not be reached' };
  }
}

/**
 * Serves /console/ (/console redirects there; public: the page holds no data; its API calls carry the operator's
 * key or token), and /console/config.json, what it needs to sign in.
 */
export function serveConsole(app: NestFastifyApplication): void {
  const verifier = app.get(JwtVerifier, { strict: false }) as JwtVerifier | undefined;
  const origins = new Set<string>();
  const learn = (config: SignInConfig) => {
    if (config && 'issuer' in config) {
      for (const url of [config.issuer, config.tokenEndpoint]) {
        const origin = originOf(url);
        if (origin) origins.add(origin);
      }
    }
    return config;
  };
  // Discovery ahead of the first page, so that its CSP names the token endpoint's origin.
  void signInConfig(verifier).then(learn);
  // @fastify/static 10 hands setHeaders the Fastify reply; Nest's option type still names a raw response.
  const setHeaders = (res: object) => {
    const reply = res as unknown as FastifyReply;
    reply.header('Content-Security-Policy', csp(origins));
    reply.header('X-Content-Type-Options', 'nosniff');
    reply.header('Referrer-Policy', 'no-referrer');
  };
  app
    .getHttpAdapter()
    .getInstance()
    .get('/console/config.json', async (_request, reply) => {
      const signIn = learn(await signInConfig(verifier));
      setHeaders(reply);
      return reply.header('Cache-Control', 'no-store').send({ signIn });
    });
  app.useStaticAssets({
    root: PAGE_DIR,
    prefix: '/console',
    index: ['index.html'],
    redirect: true,
    setHeaders,
    cacheControl: false,
  });
  const vendor = vendorDir();
  if (vendor) {
    const allowedPath = (path: string) => /^\/uPlot\.(iife\.min\.js|min\.css)$/.test(path);
    app.useStaticAssets({
      root: vendor,
      prefix: '/console/vendor/',
      decorateReply: false,
      setHeaders,
      cacheControl: false,
      allowedPath,
    });
  }
}
