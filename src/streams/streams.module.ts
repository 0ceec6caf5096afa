import { Module } from '@nestjs/common';

import { LedgerModule } from '../ledger/ledger.module.js';
import { LiveStreams } from './live-streams.js';

/** Live streams (text/event-stream) for every feature that serves one: a job's timeline, a batch's progress. */
@Module({ imports: [LedgerModule], providers: [LiveStreams], exports: [LiveStreams] })
export class StreamsModule {}
