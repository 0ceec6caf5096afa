import { Injectable, Logger } from '@nestjs/common';

import { safeErrorFields } from '../common/log-safe.js';
import type { ProviderSpec } from '../config/catalog.types.js';
import type { WaitingRoom } from '../ledger/jobs.repository.js';
import { MetricsService } from '../metrics/metrics.service.js';
import { CapacityRepository } from './capacity.repository.js';
import {
  afterAnswer,
  afterFailure,
  blankProviderState,
  type BreakerState,
  type Gate,
  gateOf,
  handsOver,
  msUntilRoom,
  pauseMsFor,
  type ProviderState,
  refill,
  type Refusal,
  roomFor,
  type Transition,
} from './capacity.rules.js';

const BREAKER_GAUGE: Record<BreakerState, number> = { closed: 0, half_open: 1, open: 2 };

/**
 * Provider capacity shared by every replica (docs/design.md#capacity). Holds the state last read from PostgreSQL
 * (refreshed at the start of every claim), records what calls teach about a provider (a rate-limit answer, a
 * counted failure, the probe's answer), and releases leases. The grant itself happens in the claim transaction,
 * under the provider's row lock (CapacityGate.admit).
 */
@Injectable()
export class ProviderCapacity {
  private readonly logger = new Logger(ProviderCapacity.name);
  private states = new Map<string, ProviderState>();
  /** performance.now() when each state was read: its `now` (the database's clock) plus what has passed since. */
  private readonly readAt = new Map<string, number>();
  /**
   * Providers gated (paused, breaker open or half-open) at the last refresh; undefined before the first. A gate seen
   * to open wakes the jobs deferred behind it (wakeDeferred): a pause cleared early, a breaker closed by its probe.
   */
  private gated?: Set<string>;
  /** Leases of finished calls, by provider, waiting to be handed to this process's next attempts (keepSpare). */
  private readonly spares = new Map<string, string[]>();
  /** Spares a claim under way has handed over (takeSpares): theirs once it commits (handedOver), released if not. */
  private readonly lent = new Set<string>();

  constructor(
    private readonly repository: CapacityRepository,
    private readonly metrics: MetricsService,
  ) {}

  async refresh(): Promise<void> {
    const started = performance.now();
    const read = await this.repository.snapshot();
    const at = performance.now();
    // A state this process wrote while the read was under way (a pause just stored, a breaker change) is newer than
    // what the read saw: keep it, or the planner would schedule the job that met a long 429 an hour out on the
    // paused provider instead of failing it over (found as a flake of test/capacity-hardening.e2e-spec.ts).
    const newer = [...this.states.values()].filter((s) => (this.readAt.get(s.provider) ?? -Infinity) > started);
    const kept = new Set(newer.map((s) => s.provider));
    const states = [...read.filter((s) => !kept.has(s.provider)), ...newer];
    const readAt = new Map(states.map((s) => [s.provider, kept.has(s.provider) ? this.readAt.get(s.provider)! : at]));
    this.states = new Map(states.map((s) => [s.provider, s]));
    this.readAt.clear();
    for (const [provider, when] of readAt) this.readAt.set(provider, when);
    for (const s of states) this.metrics.providerBreakerState.set({ provider: s.provider }, BREAKER_GAUGE[s.breaker]);
    const gated = new Set(states.filter((s) => gateOf(s).kind !== 'open').map((s) => s.provider));
    // At the first read every open provider counts as just opened: a gate may have opened while no worker ran.
    const opened = states.map((s) => s.provider).filter((p) => !gated.has(p) && (this.gated?.has(p) ?? true));
    this.gated = gated;
    if (opened.length) await this.wakeDeferred(opened);
  }

  /** Paused or breaker open, as of the last refresh (or this process's own pause or breaker change since). */
  gate(provider: string): Gate {
    const state = this.states.get(provider);
    // gateOf measures on the database's clock; the read may be a while old (an idle worker claims seldom).
    const elapsed = performance.now() - (this.readAt.get(provider) ?? performance.now());
    return gateOf(state && { ...state, now: new Date(state.now.getTime() + elapsed) });
  }

  /** A live read of the pauses, for the API (which does not claim, so holds no fresh state): ms left per provider. */
  pauses(): Promise<Map<string, number>> {
    return this.repository.pauses();
  }

  /**
   * Jobs deferred to the end of these providers' pause or cooldown are due now: the gate opened before that end
   * (an operator cleared the pause, or the half-open probe closed the breaker). Any replica may do it, any number of
   * times: it only moves next_attempt_at forward to now.
   */
  private async wakeDeferred(providers: string[]): Promise<void> {
    try {
      const woken = await this.repository.wakeDeferred(providers);
      if (woken) {
        this.logger.log({ msg: 'provider available again: jobs deferred behind it are due', providers, jobs: woken });
      }
    } catch (error) {
      // They start at the end of the pause or cooldown they were deferred to: late, never lost.
      this.logger.warn({ msg: 'waking deferred jobs failed', providers, ...safeErrorFields(error) });
    }
  }

  /**
   * Per provider, how many jobs waiting on it for capacity a claim of `limit` jobs should take (roomFor, and
   * spares).
   */
  rooms(specs: ProviderSpec[], limit: number): WaitingRoom {
    return { providers: specs.map((s) => s.name), rooms: specs.map((s) => this.roomOf(s, limit)) };
  }

  /** roomFor one provider, from the state read at the start of this claim: what other claims could take too. */
  sharedRoomOf(spec: ProviderSpec, limit: number): number {
    return roomFor(this.states.get(spec.name), spec, limit);
  }

  /** sharedRoomOf, plus the leases this process's finished calls left for it. */
  roomOf(spec: ProviderSpec, limit: number): number {
    return Math.min(limit, roomFor(this.states.get(spec.name), spec, limit) + this.spareCount(spec.name));
  }

  /** Which limit left no room, as of the last read: the reason throttled calls are counted under. */
  shortOf(spec: ProviderSpec): Refusal {
    const state = this.states.get(spec.name);
    if (state && gateOf(state).kind === 'paused') return 'paused';
    if (spec.maxConcurrency !== undefined && (state?.inFlight ?? 0) >= spec.maxConcurrency) return 'concurrency';
    const fresh = state && refill(state, spec);
    return fresh?.requestBucket !== null && fresh?.requestBucket !== undefined && fresh.requestBucket < 1
      ? 'requests_per_minute'
      : 'tokens_per_minute';
  }

  /** How long until this provider's rate buckets could admit a call of `cost` tokens, as of the last read. */
  msUntilRoom(spec: ProviderSpec, cost: number): number | undefined {
    const state = this.states.get(spec.name);
    return state && msUntilRoom(refill(state, spec), spec, cost);
  }

  throttled(provider: string, reason: Refusal | 'rate_limited', count = 1): void {
    this.metrics.providerThrottled.inc({ provider, reason }, count);
  }

  /**
   * A rate-limit answer pauses the provider for every replica (at least MIN_PAUSE_MS); it resolves once the pause is
   * stored, and this process's planner sees it at once (the job's next plan is made before the next refresh).
   */
  async pause(provider: string, retryAfterMs: number | undefined): Promise<void> {
    const { until, now } = await this.repository.pause(provider, pauseMsFor(retryAfterMs));
    const known = this.states.get(provider);
    this.remember({ ...(known ?? blankProviderState(provider, now)), pausedUntil: until, now });
    this.gated?.add(provider);
    this.throttled(provider, 'rate_limited');
    this.logger.warn({
      msg: 'provider rate-limited us: paused',
      provider,
      pausedUntil: until.toISOString(),
      retryAfterMs,
    });
  }

  /**
   * A counted failure (a definitive retryable failure other than a rate limit, or a timeout); no-op without a
   * breaker.
   */
  async recordFailure(spec: ProviderSpec, attemptId: string): Promise<void> {
    if (!spec.breaker) return;
    await this.update(spec, (state) => afterFailure(state, spec, attemptId));
  }

  /** The probe of a half-open breaker was answered: it closes. */
  async recordProbeAnswer(spec: ProviderSpec, attemptId: string): Promise<void> {
    await this.update(spec, (state) => afterAnswer(state, attemptId));
  }

  /**
   * A finished call's lease on a provider capped by maxConcurrency alone, kept for this process's next claim: that
   * claim hands it to a new attempt (one UPDATE, no lock: the provider's calls in flight do not change) instead of
   * giving it back and taking another. What the claim does not use it releases (releaseSpares).
   */
  keepSpare(spec: ProviderSpec, attemptId: string): boolean {
    if (!handsOver(spec)) return false;
    this.spares.set(spec.name, [...(this.spares.get(spec.name) ?? []), attemptId]);
    return true;
  }

  spareCount(provider: string): number {
    return this.spares.get(provider)?.length ?? 0;
  }

  /** Spares for a claim to hand over: lent until its transaction commits (handedOver), released if it does not. */
  takeSpares(provider: string, count: number): string[] {
    const pool = this.spares.get(provider) ?? [];
    const taken = pool.splice(0, count);
    if (!pool.length) this.spares.delete(provider);
    for (const id of taken) this.lent.add(id);
    return taken;
  }

  /** The claim that took these spares committed: the leases name its attempts now. */
  handedOver(leases: string[]): void {
    for (const id of leases) this.lent.delete(id);
  }

  /**
   * Gives back every spare lease not handed over (after each claim, and at shutdown): those no claim took, and
   * those a claim took whose transaction rolled back (their rows still name the finished calls).
   */
  async releaseSpares(): Promise<void> {
    const ids = [...[...this.spares.values()].flat(), ...this.lent];
    this.spares.clear();
    this.lent.clear();
    if (!ids.length) return;
    await this.repository.releaseAll(ids).catch((error: unknown) =>
      this.logger.warn({
        msg: 'lease release failed; they will expire',
        count: ids.length,
        ...safeErrorFields(error),
      }),
    );
  }

  async release(attemptId: string): Promise<void> {
    await this.repository.release(attemptId).catch((error: unknown) =>
      // The lease expires by itself; until then the provider has one call less to give.
      this.logger.warn({ msg: 'lease release failed; it will expire', attemptId, ...safeErrorFields(error) }),
    );
  }

  callStarted(provider: string): void {
    this.metrics.providerInflight.inc({ provider });
  }

  callEnded(provider: string): void {
    this.metrics.providerInflight.dec({ provider });
  }

  /** A transition to log and show; also how the in-claim grant reports the half-open one. */
  noteTransition(provider: string, transition: Transition, state: ProviderState): void {
    this.metrics.providerBreakerState.set({ provider }, BREAKER_GAUGE[transition.to]);
    const log = {
      msg: `circuit breaker ${transition.from} -> ${transition.to}`,
      provider,
      from: transition.from,
      to: transition.to,
      until: state.breakerUntil?.toISOString() ?? null,
    };
    if (transition.to === 'open') this.logger.warn(log);
    else this.logger.log(log);
  }

  /** Every provider's state and its calls in flight, for GET /v1/providers: read now, not from the cache. */
  async readNow(): Promise<{ states: ProviderState[]; inFlight: Map<string, number> }> {
    const [states, inFlight] = await Promise.all([this.repository.snapshot(), this.repository.inFlightByProvider()]);
    return { states, inFlight };
  }

  private async update(
    spec: ProviderSpec,
    change: (state: ProviderState) => { state: ProviderState; transition?: Transition },
  ): Promise<void> {
    const result = await this.repository.withLocked(spec.name, async (state, manager) => {
      const next = change(state);
      if (next.state !== state) await this.repository.save(next.state, manager);
      return next;
    });
    this.remember(result.state);
    if (result.transition) this.noteTransition(spec.name, result.transition, result.state);
    if (result.transition?.to === 'closed') {
      this.gated?.delete(spec.name);
      await this.wakeDeferred([spec.name]);
    }
  }

  private remember(state: ProviderState): void {
    this.states.set(state.provider, state);
    this.readAt.set(state.provider, performance.now());
  }
}
