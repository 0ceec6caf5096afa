import { type BeforeApplicationShutdown, Injectable, Optional } from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';

/** How often, while shutting down, connections that have gone idle are closed. */
const IDLE_SWEEP_MS = 100;

/** Process-wide shutdown flag: readiness turns false and workers stop claiming as soon as SIGTERM arrives. */
@Injectable()
export class Lifecycle implements BeforeApplicationShutdown {
  shuttingDown = false;

  constructor(@Optional() private readonly adapterHost?: HttpAdapterHost) {}

  /**
   * From here on, a keep-alive connection is closed as soon as it is idle. The server's close closes the ones idle
   * then; one still busy (a response finishing, a stream ending) would otherwise be kept for Fastify's
   * keepAliveTimeout (72 s) after its last response, and the close with it.
   */
  beforeApplicationShutdown(): void {
    this.shuttingDown = true;
    let server: { closeIdleConnections?: () => void; once?: (event: string, fn: () => void) => void } | undefined;
    try {
      server = this.adapterHost?.httpAdapter?.getHttpServer();
    } catch {
      return; // no HTTP server in this context
    }
    if (!server?.closeIdleConnections || !server.once) return;
    const timer = setInterval(() => server.closeIdleConnections?.(), IDLE_SWEEP_MS);
    timer.unref();
    server.once('close', () => clearInterval(timer));
  }
}
