import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

import { Webhook } from 'standardwebhooks';

export interface Received {
  webhookId: string;
  /** Which request this was for its webhook-id (1-based). */
  nth: number;
  body: { type: string; timestamp: string; data: Record<string, any> };
  verified: boolean;
  /** The raw body and the three headers, to verify again with a chosen secret. */
  raw: string;
  headers: Record<string, string>;
  answered: number | 'hold';
}

/**
 * What to answer the nth request for one webhook-id: a status, 'hold' (never answer: a timeout or a kill), or a
 * status after a delay (a slow receiver).
 */
export type Behaviour = (nth: number, body: Received['body']) => number | 'hold' | { status: number; afterMs: number };

/**
 * A customer's receiver on 127.0.0.1: it verifies every request with `standardwebhooks` (as a customer would)
 * once it knows the secret, and records everything it saw.
 */
export async function startReceiver(behaviour: Behaviour) {
  const received: Received[] = [];
  const held = new Set<ServerResponse>();
  const secrets: string[] = [];
  let current = behaviour;
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const raw = Buffer.concat(chunks).toString('utf8');
      const headers = {
        'webhook-id': String(req.headers['webhook-id']),
        'webhook-timestamp': String(req.headers['webhook-timestamp']),
        'webhook-signature': String(req.headers['webhook-signature']),
      };
      let verified = false;
      for (const secret of secrets) {
        try {
          new Webhook(secret).verify(raw, headers);
          verified = true;
        } catch {
          // try the next secret
        }
      }
      const body = JSON.parse(raw) as Received['body'];
      const nth = received.filter((r) => r.webhookId === headers['webhook-id']).length + 1;
      const answer = current(nth, body);
      const answered = typeof answer === 'object' ? answer.status : answer;
      received.push({ webhookId: headers['webhook-id'], nth, body, verified, raw, headers, answered });
      if (answer === 'hold') {
        held.add(res);
        return;
      }
      if (typeof answer === 'object') {
        held.add(res);
        setTimeout(() => {
          held.delete(res);
          if (!res.destroyed) res.writeHead(answer.status).end();
        }, answer.afterMs);
        return;
      }
      res.writeHead(answer).end();
    });
  });
  // Every TCP connection, whether or not an HTTP request came of it (a TLS hello to this plain server does not).
  let connections = 0;
  server.on('connection', () => connections++);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}/hooks`,
    port,
    connections: () => connections,
    received,
    trust: (secret: string) => secrets.push(secret),
    behave: (next: Behaviour) => (current = next),
    accepted: () => received.filter((r) => typeof r.answered === 'number' && r.answered >= 200 && r.answered < 300),
    close: async () => {
      for (const res of held) res.destroy();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
