import { DomainError } from '../common/domain.errors.js';

export class WebhookDisabledError extends DomainError {
  constructor(reason: string | null) {
    super('webhook_disabled', 409, `The webhook endpoint is disabled${reason ? ` (${reason})` : ''}. Enable it first: POST /v1/webhooks/{id}/enable.`);
  }
}
