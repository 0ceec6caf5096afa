import type { Batch, BatchProgress } from '../ledger/batch.types.js';
import { idAfter, type StreamMessage, type StreamSource } from '../streams/stream-source.js';
import { toBatchView } from './batch.view.js';

/**
 * A batch's stream ids (docs/design.md#live-streams), read from the batch row's own counters, never from a join
 * of its jobs (the retention purge deletes jobs, and ids must not go down): `batch.progress` carries its terminal
 * members plus one (`members - liveJobs + 1`: it only grows, as the settlement trigger takes `live_jobs` down),
 * `batch.completed` its members plus two, after every progress id. Every id is at least 1, so `Last-Event-ID: 0`
 * (the start) never names a message, and a client that resumes from the first message's id gets what follows it.
 */
export function batchStreamIds(batch: Batch): { progress: string; completed: string } {
  return { progress: String(batch.members - batch.liveJobs + 1), completed: String(batch.members + 2) };
}

/**
 * A batch's progress as a stream source: one `batch.progress` message (the batch as `GET /v1/batches/{id}`
 * answers it) whenever more of its members are terminal than the stream has said, then `batch.completed` once, and
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
