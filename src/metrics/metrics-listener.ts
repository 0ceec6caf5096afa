import { once } from 'node:events';
import { createServer, type Server } from 'node:http';

import { Inject, Injectable, Logger, type OnApplicationBootstrap, type OnApplicationShutdown } from '@nestjs/common';

import { type AppConfig, appConfig } from '../config/app.config.js';
import { MetricsService } from './metrics.service.js';

/**
 * With METRICS_PORT set, /metrics is served here and nowhere else: a NetworkPolicy or a firewall can then open the
 * API port to clients and the metrics port to Prometheus only. A bare node:http server, outside the API's hooks: no
 * request id, no auth, no request log, and it stays up until the app is closed, so the last scrape sees the drain.
 */
@Injectable()
export class MetricsListener implements OnApplicationBootstrap, OnApplicationShutdown {
  private readonly logger = new Logger('Metrics');
  private server?: Server;

  constructor(
    @Inject(appConfig.KEY) private readonly config: AppConfig,
    private readonly metrics: MetricsService,
  ) {}

  async onApplicationBootstrap(): Promise<void> {
    if (this.config.metricsPort === undefined) return;
    this.server = createServer((request, response) => {
      if (request.method !== 'GET' || request.url?.split('?')[0] !== '/metrics') {
        response
          .writeHead(404, { 'Content-Type': 'text/plain; charset=utf-8' })
          .end('Only GET /metrics is served here.\n');
        return;
      }
      this.metrics.registry.metrics().then(
        (text) => response.writeHead(200, { 'Content-Type': this.metrics.registry.contentType }).end(text),
        () =>
          response.writeHead(500, { 'Content-Type': 'text/plain; charset=utf-8' }).end('collecting metrics failed\n'),
      );
    });
    this.server.listen(this.config.metricsPort, this.config.host);
    await once(this.server, 'listening');
    this.logger.log(`metrics on ${this.config.host}:${this.config.metricsPort} (METRICS_PORT); not on the API port`);
  }

  async onApplicationShutdown(): Promise<void> {
    if (!this.server) return;
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server!.close(() => resolve()));
  }
}
