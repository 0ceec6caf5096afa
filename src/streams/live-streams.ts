import { type BeforeApplicationShutdown, Inject, Injectable, Logger, type OnModuleDestroy } from '@nestjs/common';

import { DomainError } from '../common/domain.errors.js';
import { safeErrorFields } from '../common/log-safe.js';
import { type AppConfig, appConfig } from '../config/app.config.js';
import { JobSignals } from '../ledger/job-signals.js';
import { LiveStream } from './live-stream.js';
import { idAfter, type LatestIds, type StreamSource } from './stream-source.js';

export class TooManyStreamsError extends DomainError {
  constructor(scope: 'process' | 'owner') {
    super(
      'service_unavailable',
      503,
      scope === 'process'
        ? 'This process holds MAX_STREAMS live streams; retry (another replica may have room), or page the JSON ' +
            'timeline.'
        : 'This owner holds MAX_STREAMS_PER_OWNER live streams here; close one, or page the JSON timeline.',
    );
  }
}

/**
 * Every live stream of this process (docs/design.md#live-streams), and the one fan-out of wake-ups to them: the
 * process's LISTEN session (through JobSignals) names the timelines that got rows, and only their streams read.
 * When the session changes state (a NOTIFY may have been missed) every stream reads once. A sweep every
 * STREAM_SWEEP_MS asks, in one query per kind of source, for the latest id of every open stream's timeline and
 * wakes the streams behind: a NOTIFY lost with its sender (a crash between commit and send) costs that long, once,
 * and idle streams cost the database one query per sweep, whatever their number.
 */
@Injectable()
export class LiveStreams implements OnModuleDestroy, BeforeApplicationShutdown {
  private readonly logger = new Logger(LiveStreams.name);
  private readonly byTopic = new Map<string, Set<LiveStream>>();
  private readonly perOwner = new Map<string, number>();
  private readonly sweeps: LatestIds[] = [];
  private open = 0;
  private stopping = false;
  private sweepTimer?: NodeJS.Timeout;
  private readonly unsubscribe: () => void;

  constructor(
    @Inject(appConfig.KEY) private readonly config: AppConfig,
    signals: JobSignals,
  ) {
    this.unsubscribe = signals.onEvents((ids) => {
      if (ids === null) for (const set of this.byTopic.values()) for (const stream of set) stream.poke();
      else for (const id of ids) for (const stream of this.byTopic.get(id) ?? []) stream.poke();
    });
  }

  /** How many streams this process holds now. */
  get size(): number {
    return this.open;
  }

  /** A kind of source's latest ids, read by the sweep (one query per kind for every open stream). */
  addSweep(latest: LatestIds): void {
    this.sweeps.push(latest);
  }

  /**
   * Takes a slot (MAX_STREAMS per process, MAX_STREAMS_PER_OWNER per owner: 503 beyond, before anything is
   * sent) and starts the stream. Its slot is given back when it ends, whatever ends it. `until` ends it when the
   * credential that opened it stops working (revoked, expired: I15); it returns what stops watching.
   */
  start(
    ownerId: string,
    source: StreamSource,
    lastEventId: string | undefined,
    until?: (end: () => void) => () => void,
  ): LiveStream {
    if (this.stopping || this.open >= this.config.maxStreams) throw new TooManyStreamsError('process');
    const owned = this.perOwner.get(ownerId) ?? 0;
    if (owned >= this.config.maxStreamsPerOwner) throw new TooManyStreamsError('owner');
    this.open++;
    this.perOwner.set(ownerId, owned + 1);
    const options = { heartbeatMs: this.config.streamHeartbeatMs, retryMs: RECONNECT_MS };
    const stream = new LiveStream(source, lastEventId, options);
    const unwatch = until?.(() => stream.stop());
    const set = this.byTopic.get(source.topic) ?? new Set<LiveStream>();
    set.add(stream);
    this.byTopic.set(source.topic, set);
    this.sweepTimer ??= setInterval(() => void this.sweep(), this.config.streamSweepMs);
    void stream.ended().finally(() => {
      unwatch?.();
      this.open--;
      const left = (this.perOwner.get(ownerId) ?? 1) - 1;
      if (left) this.perOwner.set(ownerId, left);
      else this.perOwner.delete(ownerId);
      set.delete(stream);
      if (!set.size && this.byTopic.get(source.topic) === set) this.byTopic.delete(source.topic);
      if (!this.open) {
        clearInterval(this.sweepTimer);
        this.sweepTimer = undefined;
      }
    });
    return stream;
  }

  /**
   * SIGTERM: every stream ends now (its client resumes elsewhere with Last-Event-ID), before the server closes. A
   * stream whose client stopped reading waits in a write that `stop()` cannot wake: after STOP_BOUND_MS its body is
   * destroyed, which ends the write and takes the client's connection with it (sendEventStream), so shutdown never
   * waits on a client.
   */
  async beforeApplicationShutdown(): Promise<void> {
    this.stopping = true;
    const streams = [...this.byTopic.values()].flatMap((set) => [...set]);
    for (const stream of streams) stream.stop();
    const all = Promise.all(streams.map((stream) => stream.ended()));
    let timer: NodeJS.Timeout | undefined;
    const bound = new Promise<'late'>((resolve) => (timer = setTimeout(() => resolve('late'), STOP_BOUND_MS)));
    const late = (await Promise.race([all, bound])) === 'late';
    clearTimeout(timer);
    if (!late) return;
    for (const stream of streams) if (!stream.body.destroyed) stream.body.destroy();
    await all;
  }

  onModuleDestroy(): void {
    this.unsubscribe();
    clearInterval(this.sweepTimer);
  }

  private async sweep(): Promise<void> {
    const topics = [...this.byTopic.keys()];
    if (!topics.length) return;
    for (const latest of this.sweeps) {
      try {
        for (const [topic, id] of await latest(topics)) {
          for (const stream of this.byTopic.get(topic) ?? []) if (idAfter(id, stream.delivered)) stream.poke();
        }
      } catch (error) {
        // The database is away: the LISTEN session's state change will wake every stream when it is back.
        this.logger.debug({ msg: 'stream sweep failed', ...safeErrorFields(error) });
      }
    }
  }
}

/** How long shutdown lets a stream finish the write it is in before it destroys the stream's connection. */
const STOP_BOUND_MS = 1000;
/** What EventSource is told to wait before it reconnects after a drop (`retry:`). */
const RECONNECT_MS = 1000;
