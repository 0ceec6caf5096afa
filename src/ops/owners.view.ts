import { ApiProperty } from '@nestjs/swagger';

export class OwnerShareView {
  @ApiProperty({ example: 'team-search' }) ownerId!: string;
  @ApiProperty({ type: 'integer', minimum: 1, maximum: 100, example: 1 }) weight!: number;
  @ApiProperty({ type: 'integer', nullable: true, minimum: 0, example: null }) maxConcurrency!: number | null;
  @ApiProperty({
    type: 'integer',
    minimum: 0,
    description: 'Jobs pending: due, scheduled for a retry, or waiting for capacity.',
  })
  queued!: number;
  @ApiProperty({
    type: 'integer',
    minimum: 0,
    description:
      'Calls in flight: attempts starting or running, and unknown or cancelled ones before their hard deadline ' +
      '(the worker still follows the call). What maxConcurrency bounds; a job between attempts holds none.',
  })
  inFlight!: number;
  @ApiProperty({
    type: 'integer',
    minimum: 0,
    description:
      'Jobs whose attempt is unknown: in inFlight (and against maxConcurrency) only until its hard deadline.',
  })
  unknown!: number;
  @ApiProperty({
    format: 'date-time',
    nullable: true,
    type: String,
    description: 'When an admin last set the weight or cap.',
  })
  updatedAt!: string | null;
}

export class OwnerSharePageView {
  @ApiProperty({ type: [OwnerShareView] }) items!: OwnerShareView[];
}
