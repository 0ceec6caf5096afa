import type { BatchProgress } from '../ledger/batch.types.js';
import { idAfter, type StreamMessage, type StreamSource } from '../streams/stream-source.js';
import { toBatchView } from './batch.view.js';

/**
 * A batch's stream ids (docs/design.md#live-streams): `batch.progress` carries the number of its jobs that are
 * terminal (it only grows: a job never leaves a terminal status), `batch.completed` the number of its jobs plus
 * one, after every progress id. So `Last-Event-ID` resumes a batch's stream like a job's: nothing repeated, and
 * the newest progress is never skipped.
 */
export function batchStreamIds(batch: BatchProgress): { progress: string; completed: string } {
  const c = batch.counts;
  const terminal = c.succeeded + c.failed + c.cancelled;
  const jobs = terminal + c.pending + c.running + c.unknown;
  return { progress: String(terminal), completed: String(jobs + 1) };
}

/**
 * A batch's progress as a stream source: one `batch.progress` message (the batch as `GET /v1/batches/{id}`
 * answers it) whenever more of its jobs are terminal than the stream has said, then `batch.completed` once, and
 * the end. Woken by the batch's own NOTIFY, which the trigger that counts its jobs down raises (migration
 * CreateBatches), and by the sweep.
 */
export class BatchProgressSource implements StreamSource {
  private done = false;

  constructor(
    readonly topic: string,
    private readonly load: () => Promise<BatchProgress>,
  ) {}

  async read(afterId: string | undefined): Promise<StreamMessage[]> {
    const batch = await this.load();
    const ids = batchStreamIds(batch);
    const messages: StreamMessage[] = [];
    if (idAfter(ids.progress, afterId)) {
      messages.push({ id: ids.progress, event: 'batch.progress', data: toBatchView(batch) });
    }
    if (batch.completedAt) {
      if (idAfter(ids.completed, afterId)) {
        messages.push({ id: ids.completed, event: 'batch.completed', data: toBatchView(batch) });
      }
      this.done = true;
    }
    return messages;
  }

  endsInMs(): number | undefined {
    return this.done ? 0 : undefined;
  }
}
