import { Module } from '@nestjs/common';
import { AttemptsRepository } from '../attempts/attempts.repository.js';
import { JobEventsRepository } from './job-events.repository.js';
import { JobWatch } from './job-watch.js';
import { JobsRepository } from './jobs.repository.js';

/** The jobs and attempts tables and the in-process wake-ups: what settlement and the features above it share. */
@Module({
  providers: [JobsRepository, AttemptsRepository, JobEventsRepository, JobWatch],
  exports: [JobsRepository, AttemptsRepository, JobEventsRepository, JobWatch],
})
export class JobsDataModule {}
