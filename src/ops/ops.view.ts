import { ApiProperty } from '@nestjs/swagger';

import { JobSummaryView, JobView } from '../jobs/job.view.js';
import type { JobEventRow } from './ops.repository.js';

export class ActorView {
  @ApiProperty({ format: 'uuid', nullable: true, type: String, description: 'The API key that acted.' })
  keyId!: string | null;
  @ApiProperty({ nullable: true, type: String, description: "The token's subject (`sub`), when a JWT acted." })
  subject!: string | null;
  @ApiProperty({ nullable: true, type: String, description: "The token's issuer (`iss`), when a JWT acted." })
  issuer!: string | null;
  @ApiProperty({ description: "The acting owner (an operator's, not necessarily the job's)." }) owner!: string;
}

export class JobEventView {
  @ApiProperty({ description: 'Increasing with time within a job.' }) id!: string;
  @ApiProperty({ format: 'date-time' }) at!: string;
  @ApiProperty({ enum: ['job', 'attempt'] }) subject!: string;
  @ApiProperty({ format: 'uuid', nullable: true, type: String }) attemptId!: string | null;
  @ApiProperty({ nullable: true, type: String }) from!: string | null;
  @ApiProperty() to!: string;
  @ApiProperty({ example: 'resolved_by_operator' }) reason!: string;
  @ApiProperty({
    type: 'object',
    nullable: true,
    additionalProperties: true,
    description: 'What else the transition recorded: for a discarded result, its digest and the winning attempt.',
  })
  detail!: unknown;
  // Inline, not a $ref: OpenAPI 3.0 ignores `nullable` beside a $ref (allOf), and null must validate.
  @ApiProperty({
    type: 'object',
    nullable: true,
    required: ['keyId', 'subject', 'issuer', 'owner'],
    selfRequired: true,
    properties: {
      keyId: { type: 'string', format: 'uuid', nullable: true, description: 'The API key that acted; null for a JWT.' },
      subject: { type: 'string', nullable: true, description: "The JWT's subject (`sub`); null for a key." },
      issuer: { type: 'string', nullable: true, description: "The JWT's issuer (`iss`); null for a key." },
      owner: { type: 'string', description: 'The acting owner.' },
    },
    description: 'The operator behind the transition (a key, or a JWT); null when the service acted.',
  })
  actor!: ActorView | null;
}

export function toEventView(row: JobEventRow): JobEventView {
  return {
    id: row.id,
    at: new Date(row.at).toISOString(),
    subject: row.subject,
    attemptId: row.attempt_id,
    from: row.from_status,
    to: row.to_status,
    reason: row.reason,
    detail: row.detail ?? null,
    actor:
      row.actor_owner === null
        ? null
        : {
            keyId: row.actor_key_id,
            subject: row.actor_subject,
            issuer: row.actor_issuer,
            owner: row.actor_owner,
          },
  };
}

export class JobEventPageView {
  @ApiProperty({ type: [JobEventView] }) items!: JobEventView[];
  @ApiProperty({
    nullable: true,
    type: String,
    description: 'Null on the last page so far: events keep arriving while the job lives.',
  })
  nextCursor!: string | null;
}

export class WaitingAttemptView {
  @ApiProperty({ format: 'uuid' }) attemptId!: string;
  @ApiProperty({ format: 'uuid' }) jobId!: string;
  @ApiProperty() owner!: string;
  @ApiProperty() operation!: string;
  @ApiProperty() provider!: string;
  @ApiProperty() number!: number;
  @ApiProperty({ enum: ['unknown', 'running', 'starting'] }) status!: string;
  @ApiProperty({ format: 'date-time' }) startedAt!: string;
  @ApiProperty({ format: 'date-time' }) deadlineAt!: string;
  @ApiProperty({ format: 'date-time', description: 'When it became unknown (or started, for live ones).' })
  waitingSince!: string;
  @ApiProperty({ description: 'Seconds since waitingSince.' }) waitedSeconds!: number;
  @ApiProperty({ nullable: true, type: String, description: "The provider's own request id, when it sent one." })
  providerRequestId!: string | null;
  @ApiProperty({ type: 'object', nullable: true, additionalProperties: true }) error!: unknown;
}

export class WaitingAttemptPageView {
  @ApiProperty({ type: [WaitingAttemptView] }) items!: WaitingAttemptView[];
  @ApiProperty({ nullable: true, type: String }) nextCursor!: string | null;
}

export class OpsJobView extends JobView {
  @ApiProperty() owner!: string;
}

export class OpsJobSummaryView extends JobSummaryView {
  @ApiProperty() owner!: string;
}

export class OpsJobPageView {
  @ApiProperty({ type: [OpsJobSummaryView] }) items!: OpsJobSummaryView[];
  @ApiProperty({ nullable: true, type: String }) nextCursor!: string | null;
}

export class MinuteStatsView {
  @ApiProperty({ format: 'date-time', description: 'Start of the minute.' }) at!: string;
  @ApiProperty() created!: number;
  @ApiProperty() succeeded!: number;
  @ApiProperty() failed!: number;
  @ApiProperty() cancelled!: number;
  @ApiProperty({ description: 'Attempts that got an answer (succeeded or failed) in the minute.' }) attempts!: number;
  @ApiProperty({ nullable: true, type: Number }) latencyP50Ms!: number | null;
  @ApiProperty({ nullable: true, type: Number }) latencyP95Ms!: number | null;
}

export class ProviderHealthView {
  @ApiProperty() provider!: string;
  @ApiProperty({ description: 'Attempts started in the window.' }) attempts!: number;
  @ApiProperty() succeeded!: number;
  @ApiProperty() failed!: number;
  @ApiProperty({ description: 'Attempts that went unknown (deadline passed, connection lost, worker gone).' })
  timeouts!: number;
  @ApiProperty({ description: 'Of those, still unknown now.' }) unknownNow!: number;
  @ApiProperty() cancelled!: number;
  @ApiProperty({ description: 'Results that lost the race (settlement races).' }) discarded!: number;
  @ApiProperty({ nullable: true, type: Number }) latencyP95Ms!: number | null;
}

export class OpsStatsView {
  @ApiProperty() minutes!: number;
  @ApiProperty({ type: [MinuteStatsView] }) perMinute!: MinuteStatsView[];
  @ApiProperty({ type: [ProviderHealthView], description: 'From the database, so across every replica.' })
  providers!: ProviderHealthView[];
}
