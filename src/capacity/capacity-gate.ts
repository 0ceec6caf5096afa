import { Injectable } from '@nestjs/common';

import type { ProviderSpec } from '../config/catalog.types.js';
import type { Job } from '../ledger/job.types.js';
import type { Ledger } from '../ledger/ledger.js';
import { CapacityRepository, type Lease } from './capacity.repository.js';
import { type BreakerState, grant, isGated, leaseTtlMs, msUntilRoom, type ProviderState } from './capacity.rules.js';
import { ProviderCapacity } from './provider-capacity.js';

/** A planned call, before capacity is granted: its job, the provider it goes to, the tokens it will count. */
export interface Candidate {
  job: Job;
  spec: ProviderSpec;
  cost: number;
}

/** An admitted call whose attempt the claim inserted; `leased` and `probe` are set here for the runner. */
export interface Started {
  job: { id: string };
  attempt: { id: string };
  /** Holds a lease on a capped provider: released when the call ends. */
  leased?: boolean;
  /** The one call that decides a half-open breaker. */
  probe?: boolean;
}

/** What a claim may start, decided under the providers' row locks (CapacityGate.admit). */
export interface Admission<C extends Candidate> {
  /** The calls that may start now, in claim order. */
  admitted: C[];
  /**
   * The rest: waiting for capacity (the job keeps its place; claims skip it while the provider has none), or
   * refused by a pause or an open breaker met under the lock (due still: the next claim plans them again).
   */
  waiting: C[];
  /** When the emptiest rate bucket that held a call back has room again (epoch ms); Infinity when none did. */
  refillAt: number;
  /**
   * Once the admitted calls' attempts are inserted: their leases (handed over from this process's finished calls,
   * or taken), the half-open probe's attempt id, and each locked provider's new state, in the same transaction.
   */
  lease(started: Started[]): Promise<void>;
}

/**
 * The claim's capacity (docs/design.md#capacity): which of the calls a claim planned may start, under each gated
 * provider's row lock, in the claim's transaction; their leases and the providers' new state commit with their
 * attempts (I9). Providers without limits or a breaker are never locked: their calls pass as they are.
 */
@Injectable()
export class CapacityGate {
  constructor(
    private readonly capacity: ProviderCapacity,
    private readonly repository: CapacityRepository,
  ) {}

  /**
   * Admits, in claim order, the calls each gated provider has capacity for. Calls on spare leases (this process's
   * finished calls') pass without the provider's lock; beyond the room the provider had when the claim began,
   * calls wait at once, without queueing for its lock; the others are granted under it (`grant`).
   */
  async admit<C extends Candidate>(ledger: Ledger, candidates: C[]): Promise<Admission<C>> {
    const byProvider = new Map<string, C[]>();
    for (const c of candidates) {
      if (isGated(c.spec)) byProvider.set(c.spec.name, [...(byProvider.get(c.spec.name) ?? []), c]);
    }
    const refused = new Set<C>();
    const onSpare = new Set<C>();
    /** The breaker's state before a call became its probe (open, or half-open with a lost probe). */
    const probes = new Map<C, BreakerState>();
    const states = new Map<string, ProviderState>();
    let refillAt = Infinity;
    const refillsIn = (ms: number | undefined) => {
      if (ms !== undefined) refillAt = Math.min(refillAt, Date.now() + ms);
    };
    for (const [provider, asking] of byProvider) {
      for (const c of asking.splice(0, this.capacity.spareCount(provider))) onSpare.add(c);
      if (!asking.length) {
        byProvider.delete(provider);
        continue;
      }
      const room = this.capacity.sharedRoomOf(asking[0].spec, asking.length);
      if (room >= asking.length) continue;
      const over = asking.splice(room);
      over.forEach((c) => refused.add(c));
      const spec = asking[0]?.spec ?? over[0].spec;
      this.capacity.throttled(provider, this.capacity.shortOf(spec), over.length);
      await ledger.waitForCapacity(
        over.map((c) => c.job),
        provider,
      );
      refillsIn(this.capacity.msUntilRoom(spec, over[0].cost));
      if (!asking.length) byProvider.delete(provider);
    }
    if (byProvider.size) {
      for (const state of await this.repository.lock([...byProvider.keys()], ledger.transaction)) {
        const asking = byProvider.get(state.provider)!;
        const spec = asking[0].spec;
        const decision = grant(
          state,
          spec,
          asking.map((c) => c.cost),
        );
        const rest = asking.slice(decision.granted);
        rest.forEach((c) => refused.add(c));
        if (decision.probe) probes.set(asking[0], state.breaker);
        states.set(state.provider, decision.state);
        if (!decision.refusal) continue;
        this.capacity.throttled(state.provider, decision.refusal, rest.length);
        // Paused or breaker open under the lock, not in the state this claim planned with: the jobs stay due, and
        // the next claim plans them with the state it reads (a fallback, or a deferral to the gate's end).
        if (decision.refusal !== 'breaker_open' && decision.refusal !== 'paused') {
          await ledger.waitForCapacity(
            rest.map((c) => c.job),
            state.provider,
          );
          refillsIn(msUntilRoom(decision.state, spec, rest[0].cost));
        }
      }
    }
    const admitted = refused.size ? candidates.filter((c) => !refused.has(c)) : candidates;
    return {
      admitted,
      waiting: refused.size ? candidates.filter((c) => refused.has(c)) : [],
      refillAt,
      lease: (started) => this.lease(ledger, started, admitted, onSpare, probes, states),
    };
  }

  private async lease<C extends Candidate>(
    ledger: Ledger,
    started: Started[],
    admitted: C[],
    onSpare: Set<C>,
    probes: Map<C, BreakerState>,
    states: Map<string, ProviderState>,
  ): Promise<void> {
    const byJob = new Map(admitted.map((c) => [c.job.id, c]));
    const moves: Array<{ from: string; to: string; ttlMs: number }> = [];
    for (const s of started) {
      const c = byJob.get(s.job.id)!;
      if (!onSpare.has(c)) continue;
      const [from] = this.capacity.takeSpares(c.spec.name, 1);
      moves.push({ from, to: s.attempt.id, ttlMs: leaseTtlMs(c.spec) });
      s.leased = true;
    }
    if (moves.length) {
      if ((await this.repository.handOver(moves, ledger.transaction)) < moves.length) {
        throw new Error('a lease expired before it was handed over; the claim is retried');
      }
      ledger.afterCommit(() => this.capacity.handedOver(moves.map((m) => m.from)));
    }
    if (!states.size) return;
    const leases = new Map<string, Lease[]>();
    for (const s of started) {
      const c = byJob.get(s.job.id)!;
      const spec = c.spec;
      if (spec.maxConcurrency !== undefined && !s.leased) {
        leases.set(spec.name, [...(leases.get(spec.name) ?? []), { attemptId: s.attempt.id, ttlMs: leaseTtlMs(spec) }]);
        s.leased = true;
      }
      const state = states.get(spec.name);
      const from = probes.get(c);
      if (from && state) {
        state.probeAttemptId = s.attempt.id;
        s.probe = true;
        const transition = { from, to: 'half_open' as const };
        ledger.afterCommit(() => this.capacity.noteTransition(spec.name, transition, state));
      }
    }
    for (const state of states.values()) {
      await this.repository.commitGrant(state, leases.get(state.provider) ?? [], ledger.transaction);
    }
  }
}
