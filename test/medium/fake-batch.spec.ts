import Anthropic from '@anthropic-ai/sdk';
import OpenAI, { toFile } from 'openai';

import { FakeBatchServer } from '../fakes/fake-batch.server.js';
import { sleep } from '../helpers/wait.js';

// The fake of both providers' batch APIs (bench/fake-batch.server.ts), driven through the real SDKs only: the
// service's deferred mode and the bench will talk to it the same way, so whatever the SDKs read here is the wire
// format they will read there. No database: it is in the middle tier for its speed (a second or two, no app).

type ChatLine = { custom_id: string; method: 'POST'; url: string; body: Record<string, unknown> };
type OutputLine = {
  id: string;
  custom_id: string;
  response: { status_code: number; request_id: string; body: any } | null;
  error: { code: string; message: string } | null;
};

const chatLine = (customId: string, text: string, model = 'gpt-4o-mini'): ChatLine => ({
  custom_id: customId,
  method: 'POST',
  url: '/v1/chat/completions',
  body: {
    model,
    messages: [
      { role: 'system', content: 'Summarise. Answer {"summary": string}.' },
      { role: 'user', content: `Summarize: ${text}` },
    ],
    max_tokens: 30,
    response_format: { type: 'json_schema', json_schema: { name: 'summarize', schema: { type: 'object' } } },
  },
});

const responsesLine = (customId: string, text: string): ChatLine => ({
  custom_id: customId,
  method: 'POST',
  url: '/v1/responses',
  body: { model: 'gpt-4o-mini', input: [{ role: 'user', content: `Summarize: ${text}` }], max_output_tokens: 30 },
});

const ids = (prefix: string, n: number) => Array.from({ length: n }, (_, i) => `${prefix}-${i}`);
const TERMINAL = ['completed', 'failed', 'expired', 'cancelled'];

describe('the fake batch APIs through the real SDKs', () => {
  let fake: FakeBatchServer;
  let openai: OpenAI;
  let anthropic: Anthropic;

  beforeAll(async () => {
    fake = await new FakeBatchServer().start();
    openai = new OpenAI({ apiKey: 'sk-test', baseURL: fake.openaiUrl, maxRetries: 0 });
    anthropic = new Anthropic({ apiKey: 'sk-ant-test', baseURL: fake.anthropicUrl, maxRetries: 0 });
  });
  beforeEach(() => {
    fake.reset();
    fake.setDefaults({ validatingMs: 40, inProgressMs: 150, finalizingMs: 40, cancellingMs: 40 });
  });
  afterAll(async () => {
    await fake?.stop();
  });

  async function submit(
    lines: ChatLine[],
    metadata?: Record<string, string>,
    endpoint: '/v1/chat/completions' | '/v1/responses' = '/v1/chat/completions',
  ): Promise<OpenAI.Batch> {
    const jsonl = lines.map((l) => JSON.stringify(l)).join('\n') + '\n';
    const file = await openai.files.create({ file: await toFile(Buffer.from(jsonl), 'batch.jsonl'), purpose: 'batch' });
    expect(file).toMatchObject({ object: 'file', purpose: 'batch', bytes: Buffer.byteLength(jsonl) });
    return openai.batches.create({ input_file_id: file.id, endpoint, completion_window: '24h', metadata });
  }

  /** Retrieves the batch every 10 ms until it ends; the statuses seen, each once, in order. */
  async function untilEnded(id: string, timeoutMs = 5000): Promise<{ batch: OpenAI.Batch; seen: string[] }> {
    const seen: string[] = [];
    const until = Date.now() + timeoutMs;
    for (;;) {
      const batch = await openai.batches.retrieve(id);
      if (seen.at(-1) !== batch.status) seen.push(batch.status);
      if (TERMINAL.includes(batch.status)) return { batch, seen };
      if (Date.now() > until) throw new Error(`batch ${id} still ${batch.status} after ${timeoutMs} ms`);
      await sleep(10);
    }
  }

  async function readLines(fileId: string | null | undefined): Promise<OutputLine[]> {
    if (!fileId) return [];
    const text = await (await openai.files.content(fileId)).text();
    return text
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l));
  }

  const contentOf = (line: OutputLine) => JSON.parse(line.response!.body.choices[0].message.content);

  describe('OpenAI', () => {
    it('runs a batch from validating through in_progress and finalizing to completed, its output shuffled', async () => {
      // Phases long enough for a 10 ms poll on a loaded machine to see each one.
      fake.nextBatches('openai', { validatingMs: 150, inProgressMs: 300, finalizingMs: 150 });
      const customIds = ids('c', 40);
      const created = await submit(
        customIds.map((id) => chatLine(id, `text of ${id}`)),
        { onejob_batch: 'pb-1' },
      );
      expect(created).toMatchObject({
        object: 'batch',
        status: 'validating',
        endpoint: '/v1/chat/completions',
        completion_window: '24h',
        metadata: { onejob_batch: 'pb-1' },
        model: 'gpt-4o-mini',
        output_file_id: null,
        request_counts: { total: 0, completed: 0, failed: 0 },
      });
      expect(created.id).toMatch(/^batch_/);
      expect(created.expires_at).toBe(created.created_at + 24 * 3600);

      const { batch, seen } = await untilEnded(created.id);
      expect(seen).toEqual(['validating', 'in_progress', 'finalizing', 'completed']);
      expect(batch.request_counts).toEqual({ total: 40, completed: 40, failed: 0 });
      expect(batch.error_file_id).toBeNull();
      expect(batch.in_progress_at).toBeGreaterThanOrEqual(batch.created_at);
      expect(batch.completed_at).toBeGreaterThanOrEqual(batch.finalizing_at!);
      expect(batch.usage?.output_tokens).toBeGreaterThan(0);

      const lines = await readLines(batch.output_file_id);
      expect(lines.map((l) => l.custom_id).sort()).toEqual([...customIds].sort());
      expect(lines.map((l) => l.custom_id)).not.toEqual(customIds); // arbitrary order, not the input's
      for (const line of lines) {
        expect(line.id).toMatch(/^batch_req_/);
        expect(line.error).toBeNull();
        expect(line.response).toMatchObject({ status_code: 200, request_id: expect.any(String) });
        expect(line.response!.body).toMatchObject({ object: 'chat.completion', model: 'gpt-4o-mini' });
        expect(contentOf(line)).toEqual({ summary: `Summarize: text of ${line.custom_id}` });
      }
      // The same bytes on a second read (two replicas, or one that restarted halfway).
      const again = await (await openai.files.content(batch.output_file_id!)).text();
      expect(again).toBe(lines.map((l) => JSON.stringify(l) + '\n').join(''));
      const file = await openai.files.retrieve(batch.output_file_id!);
      expect(file).toMatchObject({ purpose: 'batch_output', bytes: Buffer.byteLength(again) });

      // Every request counted by kind.
      expect(fake.calls.openai).toMatchObject({ upload: 1, create: 1, results: 2, file: 1, list: 0, cancel: 0 });
      expect(fake.calls.openai.retrieve).toBe(fake.batch(created.id)!.retrieves.length);
      expect(fake.totalCalls('openai', ['upload', 'create', 'retrieve', 'results'])).toBe(
        4 + fake.calls.openai.retrieve,
      );
      expect(fake.totalCalls('anthropic')).toBe(0);
    });

    it('serves /v1/responses batches, moved by hand phase by phase', async () => {
      fake.nextBatches('openai', { validatingMs: Infinity, inProgressMs: Infinity, finalizingMs: Infinity });
      const created = await submit(
        ids('r', 6).map((id) => responsesLine(id, id)),
        undefined,
        '/v1/responses',
      );
      await sleep(60);
      expect((await openai.batches.retrieve(created.id)).status).toBe('validating');
      expect(fake.advance(created.id)).toBe('in_progress');
      fake.progress(created.id, 2);
      expect((await openai.batches.retrieve(created.id)).request_counts).toEqual({
        total: 6,
        completed: 2,
        failed: 0,
      });
      expect(fake.advance(created.id)).toBe('finalizing');
      expect((await openai.batches.retrieve(created.id)).status).toBe('finalizing');
      expect(fake.advance(created.id)).toBe('completed');
      const batch = await openai.batches.retrieve(created.id);
      const lines = await readLines(batch.output_file_id);
      expect(lines).toHaveLength(6);
      for (const line of lines) {
        const body = line.response!.body;
        expect(body).toMatchObject({ object: 'response', status: 'completed' });
        expect(JSON.parse(body.output[0].content[0].text)).toEqual({ summary: `Summarize: ${line.custom_id}` });
        expect(body.usage.input_tokens).toBeGreaterThan(0);
      }
    });

    it('finds a batch by its metadata by listing, newest first, page by page', async () => {
      fake.setDefaults({ validatingMs: Infinity });
      const made: string[] = [];
      for (let i = 0; i < 5; i++) {
        made.push((await submit([chatLine(`m-${i}`, 'x')], { onejob_batch: `pb-${i}` })).id);
      }
      const listed: OpenAI.Batch[] = [];
      for await (const b of openai.batches.list({ limit: 2 })) listed.push(b);
      expect(listed.map((b) => b.id)).toEqual([...made].reverse());
      expect(fake.calls.openai.list).toBe(3); // 2 + 2 + 1, each page from the last id of the one before
      expect(fake.log.filter((c) => c.kind === 'list').map((c) => c.path)).toEqual(Array(3).fill('/v1/batches'));
      expect(listed.find((b) => b.metadata?.onejob_batch === 'pb-1')?.id).toBe(made[1]);

      // A create whose answer never came (the connection reset after the batch was made): found again by listing.
      fake.fault('openai', 'create', { lostAnswer: 'reset' });
      const error = await submit([chatLine('lost-1', 'x')], { onejob_batch: 'pb-lost' }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(OpenAI.APIConnectionError);
      let found: OpenAI.Batch | undefined;
      for await (const b of openai.batches.list({ limit: 2 })) {
        if (b.metadata?.onejob_batch === 'pb-lost') found = b;
      }
      expect(found?.status).toBe('validating');
      expect(fake.findByMetadata({ onejob_batch: 'pb-lost' }).map((b) => b.id)).toEqual([found!.id]);
    });

    it('cancels: cancelling, then cancelled with the lines done so far, the rest batch_cancelled', async () => {
      fake.nextBatches('openai', { inProgressMs: Infinity });
      const created = await submit(ids('k', 20).map((id) => chatLine(id, id)));
      await sleep(60);
      fake.progress(created.id, 8);
      const cancelling = await openai.batches.cancel(created.id);
      expect(cancelling.status).toBe('cancelling');
      expect(cancelling.cancelling_at).not.toBeNull();
      const { batch, seen } = await untilEnded(created.id);
      expect(seen.at(-1)).toBe('cancelled');
      expect(batch.cancelled_at).toBeGreaterThanOrEqual(batch.cancelling_at!);
      expect(batch.request_counts).toEqual({ total: 20, completed: 8, failed: 12 });
      const output = await readLines(batch.output_file_id);
      const errors = await readLines(batch.error_file_id);
      expect(output).toHaveLength(8);
      expect(errors).toHaveLength(12);
      for (const line of errors) {
        expect(line.response).toBeNull();
        expect(line.error?.code).toBe('batch_cancelled');
      }
      expect([...output, ...errors].map((l) => l.custom_id).sort()).toEqual(ids('k', 20).sort());
      // A second cancel answers the cancelled batch; a cancel of a completed one is refused.
      expect((await openai.batches.cancel(created.id)).status).toBe('cancelled');
      const done = await submit([chatLine('z-1', 'z')]);
      await untilEnded(done.id);
      await expect(openai.batches.cancel(done.id)).rejects.toBeInstanceOf(OpenAI.BadRequestError);
      expect(fake.calls.openai.cancel).toBe(3);
    });

    it('expires halfway: the done lines in the output file, the others batch_expired in the error file', async () => {
      fake.nextBatches('openai', { expireAfterLines: 10 });
      const created = await submit(ids('e', 20).map((id) => chatLine(id, id)));
      const { batch, seen } = await untilEnded(created.id);
      expect(seen.at(-1)).toBe('expired');
      expect(seen).not.toContain('finalizing');
      expect(batch.expired_at).not.toBeNull();
      expect(batch.request_counts).toEqual({ total: 20, completed: 10, failed: 10 });
      const output = await readLines(batch.output_file_id);
      const errors = await readLines(batch.error_file_id);
      expect(output).toHaveLength(10);
      expect(errors.map((l) => l.error?.code)).toEqual(Array(10).fill('batch_expired'));
      expect([...output, ...errors].map((l) => l.custom_id).sort()).toEqual(ids('e', 20).sort());
      // The lines done are the first of the processing order, not the first of the input.
      const done = new Set(output.map((l) => l.custom_id));
      expect(ids('e', 10).every((id) => done.has(id))).toBe(false);

      // And the 24 h window, shortened: a batch not ended by its end expires with what is done.
      fake.nextBatches('openai', { windowMs: 200, inProgressMs: Infinity });
      const slow = await submit(ids('w', 4).map((id) => chatLine(id, id)));
      await sleep(80);
      fake.progress(slow.id, 1);
      const ended = await untilEnded(slow.id);
      expect(ended.batch.status).toBe('expired');
      expect(ended.batch.expired_at! - ended.batch.created_at).toBeLessThanOrEqual(1);
      expect(ended.batch.request_counts).toEqual({ total: 4, completed: 1, failed: 3 });
    });

    it('reports partial errors as OpenAI does: 4xx and 5xx responses and line errors in the error file', async () => {
      fake.failLines(['p-3', 'p-7'], 400, 'Invalid schema');
      fake.failLines(/^p-1\d$/, 500);
      fake.rule({ match: 'p-5', errorCode: 'request_timeout', message: 'The request timed out.' });
      fake.rule({ match: (id) => id === 'p-6', text: 'not json' });
      const created = await submit(ids('p', 20).map((id) => chatLine(id, id)));
      const { batch } = await untilEnded(created.id);
      expect(batch.status).toBe('completed');
      expect(batch.request_counts).toEqual({ total: 20, completed: 7, failed: 13 });
      const output = await readLines(batch.output_file_id);
      const errors = await readLines(batch.error_file_id);
      const byId = new Map(errors.map((l) => [l.custom_id, l]));
      expect(output.map((l) => l.custom_id).sort()).toEqual(['p-0', 'p-1', 'p-2', 'p-4', 'p-6', 'p-8', 'p-9']);
      expect(output.find((l) => l.custom_id === 'p-6')!.response!.body.choices[0].message.content).toBe('not json');
      expect(byId.get('p-3')).toMatchObject({
        response: { status_code: 400, body: { error: { message: 'Invalid schema', type: 'invalid_request_error' } } },
        error: null,
      });
      expect(byId.get('p-12')!.response).toMatchObject({ status_code: 500, body: { error: { type: 'server_error' } } });
      expect(byId.get('p-5')).toMatchObject({ response: null, error: { code: 'request_timeout' } });
      expect(errors).toHaveLength(13);
    });

    it('fails a file that does not validate, with errors by line and no files', async () => {
      const lines = [chatLine('v-1', 'x'), chatLine('v-1', 'y'), { ...chatLine('v-2', 'z'), url: '/v1/embeddings' }];
      const created = await submit(lines);
      expect(created.status).toBe('validating');
      const { batch } = await untilEnded(created.id);
      expect(batch.status).toBe('failed');
      expect(batch.failed_at).not.toBeNull();
      expect(batch.output_file_id).toBeNull();
      expect(batch.errors?.data?.map((e) => [e.code, e.line])).toEqual([
        ['duplicate_custom_id', 2],
        ['mismatched_endpoint', 3],
      ]);
      // The scripted failure of a valid file.
      fake.nextBatches('openai', { fail: { code: 'token_limit_exceeded', message: 'Enqueued token limit reached.' } });
      const refused = await untilEnded((await submit([chatLine('v-3', 'x')])).id);
      expect(refused.batch.errors?.data?.[0]).toMatchObject({ code: 'token_limit_exceeded' });
    });

    it('answers scripted faults: a 429 that creates nothing, and counts it', async () => {
      fake.fault('openai', 'create', { status: 429, headers: { 'retry-after': '1' } });
      const error = await submit([chatLine('f-1', 'x')]).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(OpenAI.RateLimitError);
      expect(fake.batches()).toHaveLength(0);
      expect(fake.calls.openai.create).toBe(1);
      expect((await submit([chatLine('f-1', 'x')])).status).toBe('validating');
      // The same custom_id in two batches is what the service must never do: the fake names it.
      expect(fake.duplicateLines()).toEqual([]);
      await submit([chatLine('f-1', 'x')]);
      expect(fake.duplicateLines()).toEqual(['f-1']);
    });

    it('streams a 20 MB output file, generated line by line under backpressure', async () => {
      const lines = 200;
      const bytes = 20 * 1024 * 1024;
      fake.nextBatches('openai', { outputBytes: bytes, validatingMs: 0, inProgressMs: 0, finalizingMs: 0 });
      const created = await submit(ids('big', lines).map((id) => chatLine(id, id)));
      const { batch } = await untilEnded(created.id);
      expect(batch.status).toBe('completed');

      const before = process.memoryUsage();
      const response = await openai.files.content(batch.output_file_id!);
      const reader = response.body!.getReader();
      const decoder = new TextDecoder();
      let received = 0;
      let pending = '';
      let count = 0;
      let peak = 0;
      const first = await reader.read();
      received += first.value!.length;
      pending += decoder.decode(first.value, { stream: true });
      // The reader holds back: the fake has written what the sockets' buffers hold (3.9 MB here), not the file.
      await sleep(150);
      const download = fake.log.filter((c) => c.kind === 'results').at(-1)!;
      expect(download.bytesWritten).toBeLessThan(bytes / 2);
      for (;;) {
        const lf = pending.lastIndexOf('\n');
        if (lf >= 0) {
          for (const line of pending.slice(0, lf).split('\n')) {
            const parsed = JSON.parse(line) as OutputLine;
            expect(contentOf(parsed)).toEqual({ summary: `Summarize: ${parsed.custom_id}` });
            count++;
          }
          pending = pending.slice(lf + 1);
        }
        const m = process.memoryUsage();
        peak = Math.max(peak, m.heapUsed + m.arrayBuffers - before.heapUsed - before.arrayBuffers);
        const { done, value } = await reader.read();
        if (done) break;
        received += value.length;
        pending += decoder.decode(value, { stream: true });
      }
      expect(count).toBe(lines);
      expect(Math.abs(received - bytes)).toBeLessThan(bytes * 0.01);
      expect(download).toMatchObject({ status: 200, bytesWritten: received });
      // Never more than a chunk and a line queued in the response (105 kB here; a whole-file write queues 20 MB),
      // and the reading process (fake and client) grew by 28 MB at its peak.
      expect(download.maxBuffered).toBeLessThan(1024 * 1024);
      expect(peak).toBeLessThan(64 * 1024 * 1024);
      expect((await openai.files.retrieve(batch.output_file_id!)).bytes).toBe(received);
    });

    it('stops generating when the reader goes away halfway; a new read starts again with the same bytes', async () => {
      const bytes = 20 * 1024 * 1024;
      fake.nextBatches('openai', { outputBytes: bytes, validatingMs: 0, inProgressMs: 0, finalizingMs: 0 });
      const { batch } = await untilEnded((await submit(ids('h', 100).map((id) => chatLine(id, id)))).id);
      const reader = (await openai.files.content(batch.output_file_id!)).body!.getReader();
      const first = (await reader.read()).value!;
      await reader.cancel();
      await sleep(100);
      const cut = fake.log.filter((c) => c.kind === 'results').at(-1)!;
      const written = cut.bytesWritten!;
      await sleep(100);
      expect(cut.bytesWritten).toBe(written);
      expect(written).toBeLessThan(bytes / 2);
      expect(cut.endedAt).toBeUndefined();
      const again = (await (await openai.files.content(batch.output_file_id!)).body!.getReader().read()).value!;
      const n = Math.min(first.length, again.length);
      expect(Buffer.from(again.subarray(0, n)).equals(Buffer.from(first.subarray(0, n)))).toBe(true);
    });
  });

  describe('Anthropic', () => {
    const request = (customId: string, text = customId): Anthropic.Messages.BatchCreateParams.Request => ({
      custom_id: customId,
      params: {
        model: 'claude-test',
        max_tokens: 30,
        system: 'Summarise. Answer {"summary": string}.',
        messages: [{ role: 'user', content: `Summarize: ${text}` }],
      },
    });

    async function untilEndedA(id: string, timeoutMs = 5000) {
      const seen: string[] = [];
      const until = Date.now() + timeoutMs;
      for (;;) {
        const batch = await anthropic.messages.batches.retrieve(id);
        if (seen.at(-1) !== batch.processing_status) seen.push(batch.processing_status);
        if (batch.processing_status === 'ended') return { batch, seen };
        if (Date.now() > until) throw new Error(`batch ${id} still ${batch.processing_status}`);
        await sleep(10);
      }
    }

    async function results(id: string): Promise<Anthropic.Messages.MessageBatchIndividualResponse[]> {
      const out: Anthropic.Messages.MessageBatchIndividualResponse[] = [];
      for await (const r of await anthropic.messages.batches.results(id)) out.push(r);
      return out;
    }

    const textOf = (r: Anthropic.Messages.MessageBatchIndividualResponse) => {
      if (r.result.type !== 'succeeded') throw new Error(`${r.custom_id} ${r.result.type}`);
      const block = r.result.message.content[0];
      return block.type === 'text' ? block.text : '';
    };

    it('runs a message batch to ended, its results in arbitrary order matched by custom_id', async () => {
      const customIds = ids('a', 30);
      const created = await anthropic.messages.batches.create({ requests: customIds.map((id) => request(id)) });
      expect(created).toMatchObject({
        type: 'message_batch',
        processing_status: 'in_progress',
        request_counts: { processing: 30, succeeded: 0, errored: 0, canceled: 0, expired: 0 },
        results_url: null,
        ended_at: null,
      });
      expect(created.id).toMatch(/^msgbatch_/);
      expect(Date.parse(created.expires_at) - Date.parse(created.created_at)).toBe(24 * 3600_000);
      const { batch, seen } = await untilEndedA(created.id);
      expect(seen.at(-1)).toBe('ended');
      expect(batch.request_counts).toEqual({ processing: 0, succeeded: 30, errored: 0, canceled: 0, expired: 0 });
      expect(batch.results_url).toBe(`${fake.url}/v1/messages/batches/${created.id}/results`);
      const out = await results(created.id);
      expect(out.map((r) => r.custom_id).sort()).toEqual([...customIds].sort());
      expect(out.map((r) => r.custom_id)).not.toEqual(customIds);
      for (const r of out) {
        expect(JSON.parse(textOf(r))).toEqual({ summary: `Summarize: ${r.custom_id}` });
        if (r.result.type === 'succeeded') expect(r.result.message.usage.service_tier).toBe('batch');
      }
      // results() reads the batch, then its results_url.
      expect(fake.calls.anthropic).toMatchObject({ create: 1, results: 1, list: 0 });
      expect(fake.calls.anthropic.retrieve).toBe(fake.batch(created.id)!.retrieves.length);
      expect(fake.totalCalls('openai')).toBe(0);
    });

    it('reports errored requests with the type of their status, and params that do not validate', async () => {
      fake.failLines('x-2', 400, 'Bad params');
      fake.failLines(['x-4'], 529);
      fake.failLines('x-5', 500);
      const requests = ids('x', 8).map((id) => request(id));
      delete (requests[6].params as Partial<Anthropic.MessageCreateParamsNonStreaming>).max_tokens;
      const created = await anthropic.messages.batches.create({ requests });
      const { batch } = await untilEndedA(created.id);
      expect(batch.request_counts).toMatchObject({ succeeded: 4, errored: 4 });
      const byId = new Map((await results(created.id)).map((r) => [r.custom_id, r.result]));
      expect(byId.get('x-2')).toMatchObject({
        type: 'errored',
        error: { type: 'error', error: { type: 'invalid_request_error', message: 'Bad params' } },
      });
      expect(byId.get('x-4')).toMatchObject({ type: 'errored', error: { error: { type: 'overloaded_error' } } });
      expect(byId.get('x-5')).toMatchObject({ type: 'errored', error: { error: { type: 'api_error' } } });
      expect(byId.get('x-6')).toMatchObject({
        type: 'errored',
        error: { error: { type: 'invalid_request_error', message: 'max_tokens: Field required' } },
      });
      expect(byId.get('x-0')?.type).toBe('succeeded');
    });

    it('cancels: canceling, then ended with the requests not done canceled', async () => {
      fake.nextBatches('anthropic', { inProgressMs: Infinity });
      const created = await anthropic.messages.batches.create({ requests: ids('k', 10).map((id) => request(id)) });
      fake.progress(created.id, 4);
      const canceling = await anthropic.messages.batches.cancel(created.id);
      expect(canceling.processing_status).toBe('canceling');
      expect(canceling.cancel_initiated_at).not.toBeNull();
      expect(canceling.request_counts.processing).toBe(10);
      const { batch, seen } = await untilEndedA(created.id);
      expect(seen.at(-1)).toBe('ended');
      expect(Date.parse(batch.ended_at!)).toBeGreaterThanOrEqual(Date.parse(batch.cancel_initiated_at!));
      expect(batch.request_counts).toEqual({ processing: 0, succeeded: 4, errored: 0, canceled: 6, expired: 0 });
      const types = (await results(created.id)).map((r) => r.result.type).sort();
      expect(types).toEqual([...Array(6).fill('canceled'), ...Array(4).fill('succeeded')]);
    });

    it('expires halfway: the requests not done come back expired', async () => {
      fake.nextBatches('anthropic', { expireAfterLines: 5 });
      const created = await anthropic.messages.batches.create({ requests: ids('e', 10).map((id) => request(id)) });
      const { batch } = await untilEndedA(created.id);
      expect(batch.request_counts).toEqual({ processing: 0, succeeded: 5, errored: 0, canceled: 0, expired: 5 });
      const out = await results(created.id);
      expect(out.filter((r) => r.result.type === 'expired')).toHaveLength(5);
      expect(out.map((r) => r.custom_id).sort()).toEqual(ids('e', 10).sort());
    });

    it('lists batches newest first, page by page, and refuses a bad custom_id at create', async () => {
      const made: string[] = [];
      for (let i = 0; i < 5; i++) {
        made.push((await anthropic.messages.batches.create({ requests: [request(`l-${i}`)] })).id);
      }
      const listed: string[] = [];
      for await (const b of anthropic.messages.batches.list({ limit: 2 })) listed.push(b.id);
      expect(listed).toEqual([...made].reverse());
      expect(fake.calls.anthropic.list).toBe(3);
      await expect(anthropic.messages.batches.create({ requests: [request('has space')] })).rejects.toBeInstanceOf(
        Anthropic.BadRequestError,
      );
      await expect(
        anthropic.messages.batches.create({ requests: [request('d-1'), request('d-1')] }),
      ).rejects.toBeInstanceOf(Anthropic.BadRequestError);
      // A create whose answer was lost: the batch exists.
      fake.fault('anthropic', 'create', { lostAnswer: 'reset' });
      await expect(anthropic.messages.batches.create({ requests: [request('lost')] })).rejects.toBeInstanceOf(
        Anthropic.APIConnectionError,
      );
      expect(fake.batches('anthropic')).toHaveLength(6);
    });

    it('streams 5 MB of results through the SDK decoder', async () => {
      fake.nextBatches('anthropic', { outputBytes: 5 * 1024 * 1024, inProgressMs: 0 });
      const created = await anthropic.messages.batches.create({ requests: ids('b', 50).map((id) => request(id)) });
      const out = await results(created.id);
      expect(out).toHaveLength(50);
      for (const r of out) expect(JSON.parse(textOf(r))).toEqual({ summary: `Summarize: ${r.custom_id}` });
      const download = fake.log.filter((c) => c.kind === 'results').at(-1)!;
      expect(Math.abs(download.bytesWritten! - 5 * 1024 * 1024)).toBeLessThan(50 * 1024);
    });
  });
});
