import { Module } from '@nestjs/common';

import { AuthModule } from '../auth/auth.module.js';
import { StreamsModule } from '../streams/streams.module.js';
import { OpsController } from './ops.controller.js';
import { OpsRepository } from './ops.repository.js';
import { OpsService } from './ops.service.js';
import { OwnerSharesRepository } from './owner-shares.repository.js';
import { OwnersController } from './owners.controller.js';
import { OwnersService } from './owners.service.js';

@Module({
  imports: [AuthModule, StreamsModule],
  controllers: [OpsController, OwnersController],
  providers: [OpsRepository, OpsService, OwnerSharesRepository, OwnersService],
})
export class OpsModule {}
