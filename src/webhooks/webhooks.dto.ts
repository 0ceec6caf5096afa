import { ApiProperty, ApiPropertyOptional } from '@nestjs/swagger';
import {
  ArrayMaxSize,
  ArrayMinSize,
  ArrayUnique,
  IsArray,
  IsIn,
  IsOptional,
  IsString,
  IsUUID,
  Length,
} from 'class-validator';

import { LimitQueryDto } from '../common/page-query.dto.js';
import { WEBHOOK_EVENT_TYPES, type WebhookEventType } from '../ledger/outbox.port.js';

export class CreateWebhookDto {
  @ApiProperty({
    description:
      'Where events are POSTed. https, or http for a host:port in WEBHOOK_ALLOWED_HOSTS; a host resolving to ' +
      'anything but public unicast addresses (loopback, private, link-local, metadata, reserved, ' +
      'or such an IPv4 address inside IPv6) is refused (422), and so is each delivery that would connect to one.',
    example: 'https://hooks.example.com/onejob',
  })
  @IsString()
  @Length(1, 2000)
  url!: string;

  @ApiProperty({ enum: WEBHOOK_EVENT_TYPES, isArray: true, example: ['job.succeeded', 'job.failed'] })
  @IsArray()
  @ArrayMinSize(1)
  @ArrayMaxSize(WEBHOOK_EVENT_TYPES.length)
  @ArrayUnique()
  @IsIn(WEBHOOK_EVENT_TYPES, { each: true })
  events!: WebhookEventType[];
}

export class ListDeliveriesQueryDto extends LimitQueryDto {
  @ApiPropertyOptional({ format: 'uuid', description: 'Only the deliveries announcing this job.' })
  @IsOptional()
  @IsUUID()
  jobId?: string;

  @ApiPropertyOptional({ enum: ['pending', 'succeeded', 'failed'] })
  @IsOptional()
  @IsIn(['pending', 'succeeded', 'failed'])
  status?: 'pending' | 'succeeded' | 'failed';
}
