import { Module } from '@nestjs/common';

import { OpsController } from './ops.controller.js';
import { OpsRepository } from './ops.repository.js';
import { OpsService } from './ops.service.js';

@Module({
  controllers: [OpsController],
  providers: [OpsRepository, OpsService],
})
export class OpsModule {}
