import { applyDecorators } from '@nestjs/common';
import { ApiPropertyOptional } from '@nestjs/swagger';
import { IsOptional, IsString } from 'class-validator';

/**
 * The `access_token` query parameter of the stream routes (docs/operations.md#stream-tokens): a stream token for
 * that stream, for clients that cannot send Authorization (a browser's EventSource). The guard reads it.
 */
export const AccessTokenQuery = () =>
  applyDecorators(
    ApiPropertyOptional({
      description:
        'With `Accept: text/event-stream` and no Authorization header: a stream token made for this stream ' +
        '(POST …/stream-tokens). Refused on every other route, with any other credential, and after its expiry.',
      pattern: '^ojs_[A-Za-z0-9_-]{43}$',
    }),
    IsOptional(),
    IsString(),
  );
