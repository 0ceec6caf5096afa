import { ApiProperty } from '@nestjs/swagger';

/** A stream token as POST /v1/jobs/{id}/stream-tokens and POST /v1/batches/{id}/stream-tokens answer it. */
export class StreamTokenView {
  @ApiProperty({
    description: 'The token: opens this one stream as `?access_token=`, and nothing else. Shown once; never logged.',
    pattern: '^ojs_[A-Za-z0-9_-]{43}$',
  })
  token!: string;
  @ApiProperty({
    format: 'date-time',
    description: "At most STREAM_TOKEN_TTL_SECONDS (900) from now, and never past the caller's own credential.",
  })
  expiresAt!: string;
  @ApiProperty({
    description: "The stream's path with the token (`/v1/jobs/{id}/events?access_token=…`): give it to EventSource.",
    pattern: '^/v1/(jobs|batches)/[0-9a-f-]{36}/events\\?access_token=ojs_[A-Za-z0-9_-]{43}$',
  })
  url!: string;
}

export function toStreamTokenView(
  kind: 'job' | 'batch',
  id: string,
  issued: { token: string; expiresAt: Date },
): StreamTokenView {
  const path = kind === 'job' ? 'jobs' : 'batches';
  return {
    token: issued.token,
    expiresAt: new Date(issued.expiresAt).toISOString(),
    url: `/v1/${path}/${id}/events?access_token=${issued.token}`,
  };
}
