/** One Server-Sent Events message: `id:` (what a client resumes after), `event:` and `data:` (JSON). */
export interface StreamMessage {
  id: string;
  event: string;
  data: unknown;
}

/**
 * What a live stream follows (docs/design.md#live-streams): a job's timeline now, a batch's progress next. The
 * stream reads it from the last id it delivered whenever it is woken, so `read` must return every message after
 * `afterId`, in id order; a source whose ids could commit out of order would make a stream skip one.
 */
export interface StreamSource {
  /** The id its wake-ups carry (JobSignals.eventsWritten): a job's id, a batch's id. */
  readonly topic: string;
  /** Up to `limit` messages after `afterId` (all of them from the start when undefined), in id order. */
  read(afterId: string | undefined, limit: number): Promise<StreamMessage[]>;
  /**
   * Milliseconds until the stream may end, given what was read so far (0 or less: end now, after one last read);
   * undefined while it has no end in sight.
   */
  endsInMs(): number | undefined;
}

/** Reads, for many topics of one kind at once, the latest id each has: the sweep that covers a lost NOTIFY. */
export type LatestIds = (topics: string[]) => Promise<Map<string, string>>;

/** Ids are decimal strings of increasing integers (bigint): compared as numbers, never as text. */
export const idAfter = (a: string, b: string | undefined): boolean => b === undefined || BigInt(a) > BigInt(b);

/** The wire form of a message (the SSE format: data holds no newline, JSON.stringify writes none). */
export function sseMessage(message: StreamMessage): string {
  return `id: ${message.id}\nevent: ${message.event}\ndata: ${JSON.stringify(message.data)}\n\n`;
}
