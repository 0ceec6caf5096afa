import { DomainError } from '../common/domain.errors.js';

export class WebhookDisabledError extends DomainError {
  constructor(reason: string | null) {
    super(
      'webhook_disabled',
      409,
      `The webhook endpoint is disabled${reason ? ` (${reason})` : ''}. ` +
        'Enable it first: POST /v1/webhooks/{id}/enable.',
    );
  }
}

export class WebhookEndpointLimitError extends DomainError {
  constructor(limit: number) {
    super(
      'webhook_endpoint_limit',
      409,
      `An owner may have at most ${limit} webhook endpoints (WEBHOOK_MAX_ENDPOINTS_PER_OWNER). Delete one first.`,
    );
  }
}

export class WebhookRotationLimitError extends DomainError {
  constructor(limit: number) {
    super(
      'webhook_rotation_limit',
      409,
      `${limit} rotated-out secrets of this endpoint still sign until their promised expiry; ` +
        'rotate again when the oldest expires.',
    );
  }
}
