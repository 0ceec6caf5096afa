import { Injectable } from '@nestjs/common';
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';

import { packageVersion } from './build-info.js';

/** The service's Prometheus series (docs/operations.md says what each means and what to alert on). */
@Injectable()
export class MetricsService {
  readonly registry = new Registry();

  readonly jobsCreated = new Counter({
    name: 'onejob_jobs_created_total',
    help: 'Jobs created (201).',
    labelNames: ['operation'],
    registers: [this.registry],
  });
  readonly jobsReplayed = new Counter({
    name: 'onejob_jobs_replayed_total',
    help: 'Idempotent replays (200 + Idempotent-Replayed).',
    registers: [this.registry],
  });
  readonly idempotencyConflicts = new Counter({
    name: 'onejob_idempotency_conflicts_total',
    help: 'Requests refused with 409 idempotency_key_reused.',
    registers: [this.registry],
  });
  readonly attempts = new Counter({
    name: 'onejob_attempts_total',
    help: 'Attempt transitions, by provider and the status entered.',
    labelNames: ['provider', 'status'],
    registers: [this.registry],
  });
  readonly attemptsUnknown = new Gauge({
    name: 'onejob_attempts_unknown',
    help: 'Attempts currently unknown (read from the database by the reconciler).',
    registers: [this.registry],
  });
  readonly unknownResolved = new Counter({
    name: 'onejob_unknown_resolved_total',
    help: "Unknown attempts ended, by who ended them: the provider's record (a look-up), an operator, or the deadline.",
    labelNames: ['by'],
    registers: [this.registry],
  });
  readonly certificationRuns = new Counter({
    name: 'onejob_certification_runs_total',
    help: 'Certification runs, by provider, operation, trigger (request or schedule) and result.',
    labelNames: ['provider', 'operation', 'trigger', 'passed'],
    registers: [this.registry],
  });
  readonly decertified = new Counter({
    name: 'onejob_provider_decertified_total',
    help: 'Certifications ended by a failing scheduled run: failover stops choosing the provider for the operation.',
    labelNames: ['provider', 'operation'],
    registers: [this.registry],
  });
  readonly settlementRaces = new Counter({
    name: 'onejob_settlement_races_total',
    help: 'Results that lost the compare-and-swap and were discarded.',
    labelNames: ['provider'],
    registers: [this.registry],
  });
  readonly jobsSettled = new Counter({
    name: 'onejob_jobs_settled_total',
    help: 'Jobs settled, by final status.',
    labelNames: ['status'],
    registers: [this.registry],
  });
  readonly attemptDuration = new Histogram({
    name: 'onejob_attempt_duration_seconds',
    help: 'Provider call duration per attempt, until a result, an error or the hard timeout.',
    labelNames: ['provider', 'outcome'],
    buckets: [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
    registers: [this.registry],
  });
  readonly httpDuration = new Histogram({
    name: 'onejob_http_request_duration_seconds',
    help: 'HTTP request duration by method, route and status.',
    labelNames: ['method', 'route', 'status'],
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
    registers: [this.registry],
  });

  readonly providerInflight = new Gauge({
    name: 'onejob_provider_inflight',
    help: "This process's provider calls in flight, by provider.",
    labelNames: ['provider'],
    registers: [this.registry],
  });
  readonly providerBreakerState = new Gauge({
    name: 'onejob_provider_breaker_state',
    help: 'Circuit breaker per provider as this process last read it: 0 closed, 1 half-open, 2 open.',
    labelNames: ['provider'],
    registers: [this.registry],
  });
  readonly providerThrottled = new Counter({
    name: 'onejob_provider_throttled_total',
    help:
      'Calls held back by provider capacity, by provider and reason (concurrency, requests_per_minute, ' +
      'tokens_per_minute, rate_limited, paused, breaker_open).',
    labelNames: ['provider', 'reason'],
    registers: [this.registry],
  });

  // The backlog workers scale on (docs/operations.md#metrics), refreshed by the BacklogSampler of worker processes.
  readonly jobsDue = new Gauge({
    name: 'onejob_jobs_due',
    help:
      'Live jobs whose next attempt is due now, by provider (the one it waits on for capacity, else the first of ' +
      'its chain) and state (ready, waiting_for_capacity); counted up to 10000 ready jobs in all ' +
      'and 10000 waiting per provider.',
    labelNames: ['provider', 'state'],
    registers: [this.registry],
  });
  readonly ownerJobs = new Gauge({
    name: 'onejob_owner_jobs',
    help:
      'Live jobs of the owners with the most queued, by owner and state (queued: pending; in_flight: running); ' +
      'the top 20 owners only, so the label set stays bounded (GET /v1/ops/owners lists every owner).',
    labelNames: ['owner', 'state'],
    registers: [this.registry],
  });
  readonly oldestDueJobAge = new Gauge({
    name: 'onejob_oldest_due_job_age_seconds',
    help: 'Seconds since the oldest due job became due, by state (ready, waiting_for_capacity); 0 when none is due.',
    labelNames: ['state'],
    registers: [this.registry],
  });
  readonly buildInfo = new Gauge({
    name: 'onejob_build_info',
    help: 'Always 1: the onejob version and the Node.js version this process runs.',
    labelNames: ['version', 'node'],
    registers: [this.registry],
  });

  constructor() {
    collectDefaultMetrics({ register: this.registry, prefix: 'onejob_' });
    this.buildInfo.set({ version: packageVersion(), node: process.versions.node }, 1);
  }
}
