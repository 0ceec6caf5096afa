import { Injectable, type OnModuleDestroy } from '@nestjs/common';

import { CredentialWatch } from '../auth/credential-watch.js';
import type { Principal } from '../auth/scopes.js';
import { type StreamTokenView, toStreamTokenView } from '../auth/stream-token.view.js';
import { StreamTokensService } from '../auth/stream-tokens.service.js';
import { isGated } from '../capacity/capacity.rules.js';
import { NotFoundError, ValidationFailedError } from '../common/domain.errors.js';
import { fingerprintOf } from '../common/fingerprint.js';
import { badCursor, decodeCursor } from '../common/keyset-page.js';
import { withBackgroundQueryBound } from '../database/request-context.js';
import type { Batch, BatchItem, BatchProgress, ListedBatchItem } from '../ledger/batch.types.js';
import { BatchWriter } from '../ledger/batch-writer.js';
import { BatchesRepository, type NewBatchJob } from '../ledger/batches.repository.js';
import { isTerminal, type JobStatus } from '../ledger/job.types.js';
import { JobSignals } from '../ledger/job-signals.js';
import { DuplicateIdempotencyKeyError, OverBudgetError } from '../ledger/ledger.errors.js';
import { LedgerFactory } from '../ledger/ledger.js';
import { MetricsService } from '../metrics/metrics.service.js';
import { CatalogService } from '../providers/catalog.service.js';
import type { LiveStream } from '../streams/live-stream.js';
import { LiveStreams } from '../streams/live-streams.js';
import { idAfter } from '../streams/stream-source.js';
import { currentTraceparent } from '../telemetry/tracing.js';
import { BudgetsService, worstCaseTokens } from '../usage/budgets.service.js';
import { BatchAdmission } from './batch-admission.js';
import { batchFingerprint } from './batch-fingerprint.js';
import { BatchProgressSource, batchStreamIds } from './batch-progress-source.js';
import { type BatchCatalog, type BatchCommand, batchErrorCode, validateBatch } from './batch-validation.js';

/** A batch as its create answers it: its progress and every item's outcome. */
export interface SubmittedBatch {
  batch: BatchProgress;
  items: BatchItem[];
}

/** Jobs one transaction of a batch's cancel locks and cancels. */
const CANCEL_CHUNK = 200;
const ITEM_CURSOR = /^\d{1,5}$/;

const indexCursor = (index: number) => Buffer.from(String(index), 'utf8').toString('base64url');

/**
 * Batches (docs/design.md#batches): thousands of intents in one request, each still exactly one job under I1 and
 * I2. Validated whole before anything is written; written whole in one transaction of a few statements whatever
 * the size; a key already bound to the same intent is that job, to another a conflict that leaves it untouched.
 */
@Injectable()
export class BatchesService implements OnModuleDestroy {
  private readonly catalogView: BatchCatalog;
  /**
   * The progress read in flight per batch, shared by every stream of the batch (issue 33): a member's commit wakes
   * all of them at once, and the aggregate (its jobs per status, its cost: thousands of index probes at 10,000
   * items) is read once for all, not once per stream. A wake-up for the batch (its NOTIFY, or the LISTEN session
   * changing state) forgets the read in flight, so whoever reads after it gets a read that started after the
   * commit: no stream woken by a commit is answered from a read that started before it.
   */
  private readonly sharedReads = new Map<string, Promise<BatchProgress | undefined>>();
  private readonly unsubscribe: () => void;

  constructor(
    private readonly batches: BatchesRepository,
    private readonly writer: BatchWriter,
    private readonly ledgers: LedgerFactory,
    private readonly catalog: CatalogService,
    private readonly signals: JobSignals,
    private readonly metrics: MetricsService,
    private readonly budgets: BudgetsService,
    private readonly streams: LiveStreams,
    private readonly streamTokens: StreamTokensService,
    private readonly credentials: CredentialWatch,
    private readonly admission: BatchAdmission,
  ) {
    streams.addSweep((topics) => this.batches.latestStreamIds(topics));
    this.unsubscribe = signals.onEvents((ids) => {
      if (ids === null) this.sharedReads.clear();
      else for (const id of ids) this.sharedReads.delete(id);
    });
    this.catalogView = {
      hasOperation: (name) => this.catalog.operation(name) !== undefined,
      hasProvider: (name) => this.catalog.provider(name) !== undefined,
      inputErrors: (operation, input) => this.catalog.inputErrors(operation, input),
    };
  }

  /**
   * A plain INSERT of the batch row, no lookup first; when its key is taken, DuplicateIdempotencyKeyError, which
   * the route's IdempotencyInterceptor answers (BatchesIdempotency: the stored batch replays, or 409). Admitted
   * first (BatchAdmission: 503 past MAX_CONCURRENT_BATCHES_PER_OWNER; the process's bound was taken on arrival).
   */
  async submit(ownerId: string, idempotencyKey: string, body: unknown): Promise<SubmittedBatch> {
    const release = this.admission.admitOwner(ownerId);
    try {
      return await this.submitAdmitted(ownerId, idempotencyKey, body);
    } finally {
      release();
    }
  }

  private async submitAdmitted(ownerId: string, idempotencyKey: string, body: unknown): Promise<SubmittedBatch> {
    const { command, errors } = validateBatch(body, this.catalogView);
    if (!command) throw new ValidationFailedError(errors, 422, batchErrorCode(errors));
    const fingerprints = command.items.map((item) => fingerprintOf(item));
    const fingerprint = batchFingerprint(command, fingerprints);
    const budgeted = await this.budgets.hasBudget(ownerId);
    const jobs: NewBatchJob[] = command.items.map((item, ord) => {
      const operation = this.catalog.operation(item.operation)!;
      const providers = item.providers ?? operation.providers;
      const primary = this.catalog.provider(providers[0])!;
      return {
        ord,
        idempotencyKey: item.key,
        fingerprint: fingerprints[ord],
        operation: operation.name,
        inputJson: JSON.stringify(item.input),
        providers,
        waitingFor: isGated(primary) ? primary.name : null,
        worstCaseTokens: budgeted ? worstCaseTokens(operation, item.input) : undefined,
      };
    });
    // The write's size is the client's choice: DB_QUERY_TIMEOUT_MS bounds it, not the request's shorter bound.
    const write = () => this.write(ownerId, idempotencyKey, fingerprint, command, jobs);
    const written = await withBackgroundQueryBound(write);
    if (!written) throw new DuplicateIdempotencyKeyError(ownerId, idempotencyKey, fingerprint);
    if (written.created) {
      for (const waitingFor of new Set(jobs.map((j) => j.waitingFor))) this.signals.jobsDue(waitingFor);
    }
    const createdPer = new Map<string, number>();
    for (const job of jobs) {
      if (written.items[job.ord].outcome !== 'created') continue;
      createdPer.set(job.operation, (createdPer.get(job.operation) ?? 0) + 1);
    }
    for (const [operation, n] of createdPer) this.metrics.jobsCreated.inc({ operation }, n);
    // A batch of new jobs only is all pending with nothing spent: no need to read it back.
    const progress =
      written.created === jobs.length ? undefined : await this.batches.findProgress(written.batch.id, ownerId);
    return { batch: progress ?? this.asProgress(written.batch), items: written.items };
  }

  /** The batch's transaction (BatchWriter, in the ledger); over the owner's budget, the 429. */
  private async write(
    ownerId: string,
    idempotencyKey: string,
    fingerprint: string,
    command: BatchCommand,
    jobs: NewBatchJob[],
  ) {
    const { metadata, priority } = command;
    const batch = { ownerId, idempotencyKey, fingerprint, metadata, priority, itemCount: jobs.length };
    return this.writer.write(batch, jobs, currentTraceparent()).catch((error: unknown) => {
      if (!(error instanceof OverBudgetError)) throw error;
      throw this.budgets.exceeded(error, error.used);
    });
  }

  /** The owner's batch under this key, as stored: what a replay compares (BatchesIdempotency). */
  findByKey(ownerId: string, idempotencyKey: string): Promise<Batch | undefined> {
    return this.batches.findByKey(ownerId, idempotencyKey);
  }

  /** A replay's answer: the stored batch's progress now, and its items as first answered. */
  async replayOf(stored: Batch): Promise<SubmittedBatch> {
    const [progress, items] = await Promise.all([
      this.batches.findProgress(stored.id, stored.ownerId),
      this.batches.items(stored.id),
    ]);
    return { batch: progress ?? this.asProgress(stored), items };
  }

  /** The owner's batch, or with `ops:read` (ownerId null) anyone's; another owner's answers 404 (I7). */
  async find(ownerId: string | null, id: string): Promise<BatchProgress> {
    const batch = await this.batches.findProgress(id, ownerId);
    if (!batch) throw new NotFoundError('Batch');
    return batch;
  }

  /**
   * The batch's progress as a live stream (docs/design.md#live-streams), to the same readers as `find` (I7).
   * Undefined when it is complete and `lastEventId` is its last message: the stream is over (204).
   */
  async streamProgress(
    principal: Principal,
    ownerId: string | null,
    id: string,
    lastEventId: string | undefined,
  ): Promise<LiveStream | undefined> {
    const batch = await this.find(ownerId, id);
    const after = lastEventId === '0' ? undefined : lastEventId;
    if (batch.completedAt && !idAfter(batchStreamIds(batch).completed, after)) return undefined;
    const source = new BatchProgressSource(id, () => this.sharedProgress(ownerId, id));
    return this.streams.start(principal.ownerId, source, after, this.credentials.until(principal));
  }

  /** A stream token for the batch's stream, to whoever may read the batch (I7): another owner's batch is 404. */
  async issueStreamToken(principal: Principal, ownerId: string | null, id: string): Promise<StreamTokenView> {
    await this.find(ownerId, id);
    return toStreamTokenView('batch', id, await this.streamTokens.issue(principal, { kind: 'batch', id }));
  }

  async listItems(
    ownerId: string | null,
    id: string,
    query: { status?: JobStatus; limit: number; cursor?: string },
  ): Promise<{ items: ListedBatchItem[]; nextCursor: string | null }> {
    const after = decodeCursor(query.cursor, ITEM_CURSOR);
    await this.find(ownerId, id);
    const afterIndex = after === undefined ? undefined : Number(after);
    const rows = await this.batches.listItems(id, { status: query.status, limit: query.limit + 1, afterIndex });
    const items = rows.slice(0, query.limit);
    return { items, nextCursor: rows.length > query.limit ? indexCursor(items[items.length - 1].index) : null };
  }

  async list(
    ownerId: string,
    query: { limit: number; cursor?: string },
  ): Promise<{ items: Batch[]; nextCursor: string | null }> {
    const rows = await this.batches.listOwned(ownerId, { limit: query.limit + 1, afterId: decodeCursor(query.cursor) });
    if (!rows) throw badCursor();
    const items = rows.slice(0, query.limit);
    const last = items[items.length - 1];
    return { items, nextCursor: rows.length > query.limit ? Buffer.from(last.id, 'utf8').toString('base64url') : null };
  }

  /**
   * Cancels every job the batch created that is not terminal, each exactly as `POST /v1/jobs/:id/cancel` does (the
   * fence: its version bumped, every in-flight result discarded), a chunk of jobs per transaction, each chunk
   * locked in id order before any of it changes. A `replayed` member was created by another request (a single
   * create, another batch), which still owns it: it is left live, and the batch completes when it ends.
   */
  async cancel(ownerId: string, id: string): Promise<BatchProgress> {
    await this.find(ownerId, id);
    const ids = await this.batches.liveCreatedJobIds(id);
    for (let start = 0; start < ids.length; start += CANCEL_CHUNK) {
      await this.ledgers.run(async (ledger) => {
        for (const job of await ledger.lockJobs(ids.slice(start, start + CANCEL_CHUNK))) {
          if (!isTerminal(job.status)) await ledger.cancel(job);
        }
      });
    }
    return this.find(ownerId, id);
  }

  onModuleDestroy(): void {
    this.unsubscribe();
  }

  /** `find` for the streams: the read in flight for the batch if no wake-up came since it started, else a new one. */
  private async sharedProgress(ownerId: string | null, id: string): Promise<BatchProgress> {
    let read = this.sharedReads.get(id);
    if (!read) {
      const fresh = this.batches.findProgress(id, null);
      const forget = () => {
        if (this.sharedReads.get(id) === fresh) this.sharedReads.delete(id);
      };
      fresh.then(forget, forget);
      this.sharedReads.set(id, fresh);
      read = fresh;
    }
    const batch = await read;
    if (!batch || (ownerId !== null && batch.ownerId !== ownerId)) throw new NotFoundError('Batch');
    return batch;
  }

  private asProgress(batch: Batch): BatchProgress {
    const counts = { pending: batch.liveJobs, running: 0, unknown: 0, succeeded: 0, failed: 0, cancelled: 0 };
    return { ...batch, counts, conflicts: 0, cost: [] };
  }
}
