import type { StreamMessage, StreamSource } from '../streams/stream-source.js';
import type { OpsRepository } from './ops.repository.js';
import { toEventView } from './ops.view.js';

const TERMINAL = new Set(['succeeded', 'failed', 'cancelled']);

/**
 * A job's timeline as a stream source: one message per job_events row (`id:` its id, `event:` subject.to, such as
 * `attempt.running` or `job.succeeded`; `data:` the JSON of the paged list). It ends STREAM_GRACE_MS after the job's
 * terminal event, timed by the database's clock, so a result that loses the race just after is still sent.
 * Its ids commit in id order: every writer of a job's events holds the job's row lock (docs/design.md#live-streams).
 */
export class JobTimelineSource implements StreamSource {
  /** When the stream may end, by this process's clock; undefined while the job lives. */
  private endsAt: number | undefined;

  constructor(
    readonly topic: string,
    private readonly ops: Pick<OpsRepository, 'listEvents'>,
    private readonly options: { graceMs: number; clockOffsetMs: number; completedMs: number | null },
  ) {
    if (options.completedMs !== null) this.endsAt = this.local(options.completedMs) + options.graceMs;
  }

  async read(afterId: string | undefined, limit: number): Promise<StreamMessage[]> {
    const rows = await this.ops.listEvents(this.topic, limit, afterId ?? '0');
    for (const row of rows) {
      if (row.subject === 'job' && TERMINAL.has(row.to_status) && this.endsAt === undefined) {
        this.endsAt = this.local(new Date(row.at).getTime()) + this.options.graceMs;
      }
    }
    return rows.map((row) => ({ id: row.id, event: `${row.subject}.${row.to_status}`, data: toEventView(row) }));
  }

  endsInMs(): number | undefined {
    return this.endsAt === undefined ? undefined : this.endsAt - Date.now();
  }

  private local(databaseMs: number): number {
    return databaseMs - this.options.clockOffsetMs;
  }
}
