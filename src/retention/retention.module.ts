import { Module } from '@nestjs/common';

import { RetentionRepository } from './retention.repository.js';
import { RetentionSweeper } from './retention-sweeper.js';

@Module({
  providers: [RetentionRepository, RetentionSweeper],
  exports: [RetentionSweeper],
})
export class RetentionModule {}
