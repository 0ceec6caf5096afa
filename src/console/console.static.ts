import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

import type { NestFastifyApplication } from '@nestjs/platform-fastify';
import type { FastifyReply } from 'fastify';

const PAGE_DIR = fileURLToPath(new URL('./static/', import.meta.url));

/**
 * Where the charting library is: copied beside the page by the build (no CDN: the console loads nothing from
 * outside the service), or read from node_modules when the app runs from its sources (tests).
 */
function vendorDir(): string | undefined {
  if (existsSync(`${PAGE_DIR}vendor/`)) return undefined;
  return `${dirname(createRequire(import.meta.url).resolve('uplot'))}/`;
}

/** Nothing but the service itself: scripts, styles, images and API calls go to this origin only. */
const CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "form-action 'none'",
  "frame-ancestors 'none'",
  "base-uri 'none'",
].join('; ');

// @fastify/static 10 hands setHeaders the Fastify reply; Nest's option type still names a raw response.
const setHeaders = (res: object) => {
  const reply = res as unknown as FastifyReply;
  reply.header('Content-Security-Policy', CSP);
  reply.header('X-Content-Type-Options', 'nosniff');
  reply.header('Referrer-Policy', 'no-referrer');
};

/**
 * Serves /console/ (/console redirects there; public: the page holds no data; its API calls carry the operator's
 * key).
 */
export function serveConsole(app: NestFastifyApplication): void {
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
