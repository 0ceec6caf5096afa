import { Body, Controller, Get, Param, Post } from '@nestjs/common';
import { ApiCreatedResponse, ApiOkResponse, ApiProperty, ApiTags } from '@nestjs/swagger';
import { IsString, Length } from 'class-validator';

import { RequireScopes } from '../auth/auth.decorators.js';
import { ApiEndpoint } from '../common/api-docs.js';
import type { CertificationReport } from './certification.types.js';
import { ProvidersService } from './providers.service.js';
import { OperationView, ProviderView } from './providers.view.js';

export class CertifyDto {
  @ApiProperty({
    description: 'The operation whose contract suite to run.',
    example: 'summarize',
    minLength: 1,
    maxLength: 100,
  })
  @IsString()
  @Length(1, 100)
  operation!: string;
}

const object = { schema: { type: 'object', additionalProperties: true } };

@ApiTags('catalog')
@Controller({ version: '1' })
export class ProvidersController {
  constructor(private readonly providers: ProvidersService) {}

  @Get('providers')
  @ApiEndpoint({
    operationId: 'listProviders',
    summary: 'The providers of the catalog, each with its certifications per operation',
    problems: [],
  })
  @ApiOkResponse({ type: ProviderView, isArray: true })
  listProviders(): Promise<ProviderView[]> {
    return this.providers.listProviders();
  }

  @Get('operations')
  @ApiEndpoint({
    operationId: 'listOperations',
    summary: 'The operations of the catalog, with their schemas and default chains',
    problems: [],
  })
  @ApiOkResponse({ type: OperationView, isArray: true })
  listOperations(): OperationView[] {
    return this.providers.listOperations();
  }

  @Post('providers/:name/certifications')
  @RequireScopes('providers:certify')
  @ApiEndpoint({
    operationId: 'certifyProvider',
    summary: "Run an operation's contract suite against the provider and store the report (passed or not)",
    problems: [
      { status: 400, codes: ['validation_failed'] },
      { status: 404, codes: ['not_found'] },
      { status: 422, codes: ['unknown_operation'] },
    ],
  })
  @ApiCreatedResponse(object)
  certifyProvider(@Param('name') name: string, @Body() body: CertifyDto): Promise<CertificationReport> {
    return this.providers.certify(name, body.operation);
  }
}
