import { setMaxListeners } from 'node:events';

/**
 * A signal that aborts when `ms` have passed or when any of `others` aborts, driven by a timer of our own.
 *
 * Not `AbortSignal.any([AbortSignal.timeout(ms), other])`: on Node 20 (nodejs/node#57736) and 24
 * (nodejs/node#65995) a composed signal can be garbage-collected with its timeout, and then it never fires. Here
 * the timer's closure holds the controller strongly, and each source holds its listener, so nothing that must
 * fire is only weakly reachable. `clear()` stops the timer and unhooks the sources once the work is over (call it
 * in a `finally`), so a long-lived source (a shutdown signal) does not gather listeners.
 */
export interface Deadline {
  readonly signal: AbortSignal;
  clear(): void;
}

export function deadline(ms: number, ...others: (AbortSignal | undefined)[]): Deadline {
  const controller = new AbortController();
  const sources = others.filter((s): s is AbortSignal => s !== undefined);
  const unhook = () => {
    clearTimeout(timer);
    for (const source of sources) source.removeEventListener('abort', follow);
  };
  const follow = function (this: AbortSignal) {
    unhook();
    controller.abort(this.reason);
  };
  const timer = setTimeout(
    () => {
      unhook();
      controller.abort(new DOMException(`The operation timed out after ${ms} ms`, 'TimeoutError'));
    },
    Math.max(0, ms),
  );
  // Like AbortSignal.timeout: a pending deadline alone does not keep the process alive.
  timer.unref();
  for (const source of sources) {
    if (source.aborted) {
      unhook();
      controller.abort(source.reason);
      break;
    }
    source.addEventListener('abort', follow, { once: true });
  }
  return { signal: controller.signal, clear: unhook };
}

/**
 * A long-lived controller that every call in flight follows (a worker's or a dispatcher's shutdown): one listener
 * per call, each unhooked when its call ends, so Node's leak warning past 10 listeners is lifted for this signal
 * only (it printed `MaxListenersExceededWarning` in `npm run bench` with 11 calls in flight).
 */
export function shutdownController(): AbortController {
  const controller = new AbortController();
  setMaxListeners(0, controller.signal);
  return controller;
}
