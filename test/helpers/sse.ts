import { get } from 'node:http';

import { EventSource } from 'eventsource';

export interface Received {
  id: string;
  event: string;
  data: { id: string; subject: string; to: string; reason: string };
}

export interface Follower {
  messages: Received[];
  /** The Last-Event-ID of every connection made (undefined for the first, without one). */
  connections: Array<string | undefined>;
  /** How many messages had arrived when each connection was made: `connections[i]` should name the last of them. */
  receivedAtConnection: number[];
  /** Resolves when the service said the stream is over (204: EventSource stops). */
  over: Promise<void>;
  close(): void;
}

const KINDS = [
  ...['job', 'attempt'].flatMap((s) =>
    ['pending', 'running', 'unknown', 'succeeded', 'failed', 'cancelled', 'starting'].map((to) => `${s}.${to}`),
  ),
  'batch.progress',
  'batch.completed',
];

const following = new Set<{ close(): void }>();

// A follower left open by a failed test would reconnect forever and keep Jest from exiting.
afterEach(() => {
  for (const source of following) source.close();
  following.clear();
});

/**
 * Follows a stream with the `eventsource` package (the WHATWG EventSource for Node): it reconnects by itself with
 * Last-Event-ID, and stops on a 204. The key goes in a header through its `fetch` hook.
 */
export function follow(url: string, key: string, options: { lastEventId?: string } = {}): Follower {
  const messages: Received[] = [];
  const connections: Array<string | undefined> = [];
  const receivedAtConnection: number[] = [];
  let first = true;
  const source = new EventSource(url, {
    fetch: (input, init) => {
      const headers: Record<string, string> = {
        ...(init?.headers as Record<string, string>),
        Authorization: `Bearer ${key}`,
      };
      if (first && options.lastEventId) headers['Last-Event-ID'] = options.lastEventId;
      first = false;
      connections.push(headers['Last-Event-ID'] ?? headers['last-event-id']);
      receivedAtConnection.push(messages.length);
      return fetch(input, { ...init, headers });
    },
  });
  const over = new Promise<void>((resolve, reject) => {
    source.addEventListener('error', (event) => {
      const code = (event as unknown as { code?: number }).code;
      if (code === 204) resolve();
      else if (code !== undefined && code !== 200) reject(new Error(`stream failed with ${code}`));
    });
  });
  for (const kind of KINDS) {
    source.addEventListener(kind, (event) => {
      messages.push({ id: event.lastEventId, event: event.type, data: JSON.parse(event.data) });
    });
  }
  following.add(source);
  return { messages, connections, receivedAtConnection, over, close: () => source.close() };
}

/**
 * Reads a stream's raw text until `until` holds or the stream ends, over node:http: one connection, closed when
 * done (fetch's pool may keep a spare connection open, which would hold the server's close).
 */
export function readRaw(
  url: string,
  headers: Record<string, string>,
  until: (text: string) => boolean,
  timeoutMs = 10_000,
): Promise<{ status: number; headers: Record<string, string | string[] | undefined>; text: string }> {
  return new Promise((resolve, reject) => {
    const req = get(url, { headers: { Accept: 'text/event-stream', ...headers }, agent: false }, (res) => {
      let text = '';
      const done = () => {
        clearTimeout(timer);
        req.destroy();
        resolve({ status: res.statusCode ?? 0, headers: res.headers, text });
      };
      const timer = setTimeout(done, timeoutMs);
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        text += chunk;
        if (until(text)) done();
      });
      res.on('end', done);
      res.on('error', done);
    });
    req.on('error', reject);
  });
}

/** The ids of the `id:` lines of a raw stream, in order. */
export const idsOf = (text: string) => [...text.matchAll(/^id: (\d+)$/gm)].map((m) => m[1]);

/** Opens a stream and holds it (node:http, one connection): its status and headers, and how to leave. */
export function openStream(
  url: string,
  headers: Record<string, string>,
): Promise<{ status: number; headers: Record<string, string | string[] | undefined>; close(): void }> {
  return new Promise((resolve, reject) => {
    const req = get(url, { headers: { Accept: 'text/event-stream', ...headers }, agent: false }, (res) => {
      res.resume();
      resolve({ status: res.statusCode ?? 0, headers: res.headers, close: () => req.destroy() });
    });
    req.on('error', reject);
  });
}
