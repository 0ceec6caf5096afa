import { Module } from '@nestjs/common';
import { RetentionSweeper } from './retention-sweeper.js';
import { RetentionRepository } from './retention.repository.js';

@Module({
  providers: [RetentionRepository, RetentionSweeper],
  exports: [RetentionSweeper],
})
export class RetentionModule {}
