/** Polls `probe` until it returns a value that satisfies `done`, or fails with the last value seen. */
export async function waitFor<T>(
  probe: () => Promise<T>,
  done: (value: T) => boolean,
  timeoutMs = 10_000,
  everyMs = 25,
): Promise<T> {
  const until = Date.now() + timeoutMs;
  let last: T = await probe();
  while (!done(last)) {
    if (Date.now() > until) {
      throw new Error(`condition not met within ${timeoutMs} ms; last value: ${JSON.stringify(last)}`);
    }
    await new Promise((r) => setTimeout(r, everyMs));
    last = await probe();
  }
  return last;
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
