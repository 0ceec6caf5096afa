import { Module } from '@nestjs/common';

import { StreamsModule } from '../streams/streams.module.js';
import { OpsController } from './ops.controller.js';
import { OpsRepository } from './ops.repository.js';
import { OpsService } from './ops.service.js';

@Module({
  imports: [StreamsModule],
  controllers: [OpsController],
  providers: [OpsRepository, OpsService],
})
export class OpsModule {}
