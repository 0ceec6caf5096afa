/** Content negotiation of the paths that serve both: a client that accepts text/event-stream gets the stream. */
export function wantsEventStream(accept: string | undefined): boolean {
  return /(^|,)\s*text\/event-stream\s*(;|,|$)/i.test(accept ?? '');
}
