import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';

import { freePort } from '../../src/database/embedded-postgres.js';

export interface ServiceProcess {
  child: ChildProcess;
  baseUrl: string;
  port: number;
  output(): string;
  /** Resolves with the exit code (null when killed by a signal) and the signal. */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  kill(signal?: NodeJS.Signals): void;
}

/** Runs the built service (dist/, made by `npm test`'s pretest build) as a separate OS process. */
export async function spawnService(env: Record<string, string>, nodeArgs: string[] = []): Promise<ServiceProcess> {
  const port = env.PORT ? Number(env.PORT) : await freePort();
  const child = spawn(process.execPath, [...nodeArgs, 'dist/src/main.js'], {
    env: { PATH: process.env.PATH ?? '', HOST: '127.0.0.1', LOG_LEVEL: 'warn', PORT: String(port), ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let text = '';
  child.stdout!.on('data', (chunk: Buffer) => (text += chunk.toString()));
  child.stderr!.on('data', (chunk: Buffer) => (text += chunk.toString()));
  const exited = once(child, 'exit').then(([code, signal]) => ({
    code: code as number | null,
    signal: signal as NodeJS.Signals | null,
  }));
  return {
    child,
    port,
    baseUrl: `http://127.0.0.1:${port}`,
    output: () => text,
    exited,
    kill: (signal = 'SIGTERM') => void child.kill(signal),
  };
}

/** Polls /health/ready until it answers 200, or fails with the process output. */
export async function waitUntilReady(service: ServiceProcess, timeoutMs = 20_000): Promise<void> {
  const until = Date.now() + timeoutMs;
  let exited = false;
  void service.exited.then(() => (exited = true));
  while (Date.now() < until && !exited) {
    try {
      const res = await fetch(`${service.baseUrl}/health/ready`);
      if (res.status === 200) return;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`service did not become ready:\n${service.output()}`);
}
