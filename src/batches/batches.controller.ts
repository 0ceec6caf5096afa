import { Body, Controller, Get, Headers, HttpCode, Param, Post, Query, Res, UseInterceptors } from '@nestjs/common';
import { ApiBody, ApiCreatedResponse, ApiHeader, ApiOkResponse, ApiParam, ApiTags } from '@nestjs/swagger';
import type { FastifyReply } from 'fastify';

import {
  AcceptsStreamToken,
  CurrentPrincipal,
  OwnerId,
  RequireAnyScope,
  RequireScopes,
} from '../auth/auth.decorators.js';
import type { Principal } from '../auth/scopes.js';
import { StreamTokenView } from '../auth/stream-token.view.js';
import { ApiEndpoint, ApiJsonOrEventStream, headerRef } from '../common/api-docs.js';
import { resumeAfter } from '../common/event-ids.js';
import { UuidPipe } from '../common/uuid.pipe.js';
import { IdempotencyKey, MAX_IDEMPOTENCY_KEY_LENGTH } from '../jobs/request-headers.js';
import { sendEventStream, wantsEventStream } from '../streams/event-stream-reply.js';
import {
  BatchCreatedView,
  BatchJobPageView,
  BatchPageView,
  BatchView,
  toBatchJobView,
  toBatchSummaryView,
  toBatchView,
} from './batch.view.js';
import { sendBatch } from './batch-reply.js';
import { BatchEventsQueryDto, CreateBatchDto, ListBatchesQueryDto, ListBatchJobsQueryDto } from './batches.dto.js';
import { BatchesIdempotency } from './batches.idempotency.js';
import { BatchesService } from './batches.service.js';

const batchId = ApiParam({ name: 'id', description: 'A batch id.', schema: { type: 'string', format: 'uuid' } });
const badQuery = { status: 400, codes: ['validation_failed'] };
/** ops:read reads any owner's batch (I7's one exception); jobs:read its owner's. */
const readerOf = (principal: Principal) => (principal.scopes.includes('ops:read') ? null : principal.ownerId);

@ApiTags('batches')
@Controller({ path: 'batches', version: '1' })
export class BatchesController {
  constructor(private readonly batches: BatchesService) {}

  @Post()
  @RequireScopes('jobs:write')
  // A batch key taken already is answered by BatchesIdempotency: the replay, or 409.
  @UseInterceptors(BatchesIdempotency)
  @ApiHeader({
    name: 'Idempotency-Key',
    required: true,
    description:
      "The batch's own key (1-255 visible ASCII characters), in a key space of its own: the same key with the same " +
      "items (in order) and metadata returns the same batch; with another body, 409. Each item's `key` is its " +
      "job's key in the owner's job key space, exactly as POST /v1/jobs's header.",
    schema: {
      type: 'string',
      minLength: 1,
      maxLength: MAX_IDEMPOTENCY_KEY_LENGTH,
      pattern: '^[\\x21-\\x7e]+$',
      example: 'import-2026-12-01',
    },
  })
  @ApiBody({ type: CreateBatchDto })
  @ApiEndpoint({
    operationId: 'createBatch',
    summary: 'Create up to 10,000 jobs in one request, idempotently, all or none',
    description:
      'Validated whole: a bad item answers 422 naming its index (`items[3].input.text`) and nothing is written; ' +
      'each error has its own code (`unknown_operation`, `unknown_provider`, `validation_failed`), and the ' +
      'problem the one they share (else `validation_failed`). Written whole in one transaction. Per item: ' +
      '`created`, `replayed` (its key names a job of the same intent) or `conflict` (another intent: code ' +
      '`idempotency_key_reused`, `jobId` that job, untouched and no member of the batch). ' +
      'Body limit: BATCH_BODY_LIMIT_BYTES (16 MiB by default). ' +
      "An owner with a budget has the batch's worst case reserved whole, or the batch refused whole (429). " +
      'At most MAX_CONCURRENT_BATCHES batches are written at once per process, MAX_CONCURRENT_BATCHES_PER_OWNER ' +
      'per owner: one more is 503 `service_unavailable` with Retry-After, and nothing is written.',
    problems: [
      { status: 400, codes: ['idempotency_key_missing', 'idempotency_key_invalid', 'validation_failed'] },
      { status: 409, codes: ['idempotency_key_reused'] },
      { status: 422, codes: ['validation_failed', 'unknown_operation', 'unknown_provider'] },
      { status: 429, codes: ['budget_exceeded'] },
      { status: 503, codes: ['service_unavailable'] },
    ],
  })
  @ApiCreatedResponse({
    type: BatchCreatedView,
    description: 'Created. `Location: /v1/batches/{id}`.',
    headers: { Location: headerRef('BatchLocation') },
  })
  @ApiOkResponse({
    type: BatchCreatedView,
    description: 'Replayed: same key and body. Header `Idempotent-Replayed: true`; the items as first answered.',
    headers: { Location: headerRef('BatchLocation'), 'Idempotent-Replayed': headerRef('IdempotentReplayed') },
  })
  async createBatch(
    @OwnerId() ownerId: string,
    @IdempotencyKey() idempotencyKey: string,
    @Body() body: unknown,
    @Res() reply: FastifyReply,
  ): Promise<void> {
    sendBatch(reply, 201, await this.batches.submit(ownerId, idempotencyKey, body));
  }

  @Get(':id')
  @RequireAnyScope('jobs:read', 'ops:read')
  @batchId
  @ApiEndpoint({
    operationId: 'getBatch',
    summary: 'A batch with its progress: jobs per status, cost, completedAt once every job is terminal',
    description:
      "For the batch's owner (`jobs:read`) and for operators (`ops:read`, any owner). " +
      "Another owner's batch answers 404.",
    problems: [badQuery, { status: 404, codes: ['not_found'] }],
  })
  @ApiOkResponse({ type: BatchView })
  async getBatch(@CurrentPrincipal() principal: Principal, @Param('id', UuidPipe) id: string): Promise<BatchView> {
    return toBatchView(await this.batches.find(readerOf(principal), id));
  }

  @Get(':id/events')
  @RequireAnyScope('jobs:read', 'ops:read')
  @AcceptsStreamToken('batch')
  @batchId
  @ApiEndpoint({
    operationId: 'streamBatchEvents',
    summary: "A batch's progress, live: a message each time more of its jobs are terminal, then batch.completed",
    description:
      "For the batch's owner (`jobs:read`) and for operators (`ops:read`, any owner); another owner's batch " +
      'answers 404. With `Accept: text/event-stream`: a `batch.progress` message (`data:` the batch as GET ' +
      '/v1/batches/{id} answers it) now and whenever more of its jobs are terminal, then one `batch.completed` ' +
      'message, and the end. Ids only grow: resume with `Last-Event-ID` (or `?lastEventId=`). Without it, the ' +
      'batch as JSON. 503 with Retry-After past MAX_STREAMS or MAX_STREAMS_PER_OWNER. EventSource opens it with ' +
      '`?access_token=` and a stream token for this batch (POST /v1/batches/{id}/stream-tokens).',
    problems: [badQuery, { status: 404, codes: ['not_found'] }],
  })
  @ApiJsonOrEventStream(BatchView, {
    json: 'The batch now.',
    stream: 'its progress, live.',
    example: 'retry: 1000\n\nid: 7\nevent: batch.progress\ndata: {"id":"…","counts":{"succeeded":7,...}}\n\n',
  })
  async streamBatchEvents(
    @CurrentPrincipal() principal: Principal,
    @Param('id', UuidPipe) id: string,
    @Query() query: BatchEventsQueryDto,
    @Headers('accept') accept: string | undefined,
    @Headers('last-event-id') lastEventId: string | undefined,
    @Res() reply: FastifyReply,
  ): Promise<void> {
    const after = resumeAfter(query.lastEventId, lastEventId);
    if (!wantsEventStream(accept)) {
      return void reply.send(toBatchView(await this.batches.find(readerOf(principal), id)));
    }
    sendEventStream(reply, await this.batches.streamProgress(principal, readerOf(principal), id, after));
  }

  @Post(':id/stream-tokens')
  @HttpCode(201)
  @RequireAnyScope('jobs:read', 'ops:read')
  @batchId
  @ApiEndpoint({
    operationId: 'createBatchStreamToken',
    summary: "A token that opens this batch's live stream, and nothing else, for at most 15 minutes",
    description:
      "For the batch's owner (`jobs:read`) and operators (`ops:read`, any owner); another owner's batch answers " +
      '404. Give `url` to EventSource: the token is accepted only as `?access_token=` on GET ' +
      '/v1/batches/{id}/events with `Accept: text/event-stream`, lives STREAM_TOKEN_TTL_SECONDS (at most 900) and ' +
      'never past the credential that asked for it.',
    problems: [badQuery, { status: 404, codes: ['not_found'] }],
  })
  @ApiCreatedResponse({ type: StreamTokenView })
  createBatchStreamToken(
    @CurrentPrincipal() principal: Principal,
    @Param('id', UuidPipe) id: string,
  ): Promise<StreamTokenView> {
    return this.batches.issueStreamToken(principal, readerOf(principal), id);
  }

  @Get(':id/jobs')
  @RequireAnyScope('jobs:read', 'ops:read')
  @batchId
  @ApiEndpoint({
    operationId: 'listBatchJobs',
    summary: "A batch's items with their jobs' status, in item order (keyset pages)",
    problems: [badQuery, { status: 404, codes: ['not_found'] }],
  })
  @ApiOkResponse({ type: BatchJobPageView })
  async listBatchJobs(
    @CurrentPrincipal() principal: Principal,
    @Param('id', UuidPipe) id: string,
    @Query() query: ListBatchJobsQueryDto,
  ): Promise<BatchJobPageView> {
    const page = await this.batches.listItems(readerOf(principal), id, query);
    return { items: page.items.map(toBatchJobView), nextCursor: page.nextCursor };
  }

  @Get()
  @RequireScopes('jobs:read')
  @ApiEndpoint({
    operationId: 'listBatches',
    summary: "The owner's batches, newest first (keyset pagination)",
    problems: [badQuery],
  })
  @ApiOkResponse({ type: BatchPageView })
  async listBatches(@OwnerId() ownerId: string, @Query() query: ListBatchesQueryDto): Promise<BatchPageView> {
    const page = await this.batches.list(ownerId, query);
    return { items: page.items.map(toBatchSummaryView), nextCursor: page.nextCursor };
  }

  @Post(':id/cancel')
  @HttpCode(200)
  @RequireScopes('jobs:write')
  @batchId
  @ApiEndpoint({
    operationId: 'cancelBatch',
    summary: "Cancel every job the batch created that is not terminal (each a fence, as a job's cancel is)",
    description:
      'Terminal jobs are left as they are; a batch whose jobs are all terminal answers 200 unchanged. Items ' +
      '`replayed` name jobs another request created (a single create, another batch): they are not cancelled, ' +
      'and the batch completes when they end (cancel them with POST /v1/jobs/{id}/cancel).',
    problems: [badQuery, { status: 404, codes: ['not_found'] }],
  })
  @ApiOkResponse({ type: BatchView })
  async cancelBatch(@OwnerId() ownerId: string, @Param('id', UuidPipe) id: string): Promise<BatchView> {
    return toBatchView(await this.batches.cancel(ownerId, id));
  }
}
