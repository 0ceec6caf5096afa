import { once } from 'node:events';
import { createConnection, createServer, type Server, type Socket } from 'node:net';

/**
 * A TCP proxy in front of a server that a test can cut (every connection dropped, new ones refused, as when a
 * database host goes away) and restore on the same port.
 */
export interface TcpProxy {
  port: number;
  /**
   * New connections go to another server from now on (a Kubernetes Service after a failover, HAProxy on Patroni's
   * `/primary`). `dropExisting` cuts the ones open now, as those do; without it they stay on the old server.
   */
  retarget(host: string, port: number, options: { dropExisting: boolean }): void;
  cut(): Promise<void>;
  restore(): Promise<void>;
  close(): Promise<void>;
}

export async function startTcpProxy(targetHost: string, targetPort: number): Promise<TcpProxy> {
  const sockets = new Set<Socket>();
  let target = { host: targetHost, port: targetPort };
  let server: Server | undefined;
  let port = 0;
  const listen = async () => {
    // Restoring a proxy that is up is a no-op: a second server on the port would outlive close().
    if (server) return;
    server = createServer((client) => {
      const upstream = createConnection(target);
      for (const s of [client, upstream]) {
        sockets.add(s);
        s.on('close', () => sockets.delete(s));
        s.on('error', () => undefined);
      }
      client.pipe(upstream).pipe(client);
    });
    server.listen(port, '127.0.0.1');
    await once(server, 'listening');
    const address = server.address();
    port = typeof address === 'object' && address ? address.port : port;
  };
  const stop = async () => {
    if (!server) return;
    const closing = new Promise<void>((resolve) => server!.close(() => resolve()));
    for (const s of sockets) s.destroy();
    await closing;
    server = undefined;
  };
  await listen();
  return {
    get port() {
      return port;
    },
    retarget: (host, targetPortNow, { dropExisting }) => {
      target = { host, port: targetPortNow };
      if (dropExisting) for (const s of sockets) s.destroy();
    },
    cut: stop,
    restore: listen,
    close: stop,
  };
}
