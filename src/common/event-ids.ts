import { ValidateBy, type ValidationOptions } from 'class-validator';

import { ValidationFailedError } from './domain.errors.js';

/**
 * A stream's ids on the wire (docs/design.md#live-streams): decimal strings of a PostgreSQL `bigint`, 0 meaning
 * "from the start". The document's pattern (`Last-Event-ID`, `?lastEventId=`) cannot bound the value, so every
 * id a client sends is checked against both: within the pattern and at most 2^63 - 1. An id past that range names
 * nothing a stream sent, and would otherwise reach the database (a 500) or a comparison no id ever passes (a
 * stream that never delivers).
 */
export const EVENT_ID_PATTERN = '^(0|[1-9]\\d{0,18})$';
const EVENT_ID_SHAPE = new RegExp(EVENT_ID_PATTERN);
export const MAX_EVENT_ID = 9223372036854775807n;

/** An id a stream may have sent: in the pattern and within bigint. */
export const isEventId = (value: unknown): value is string =>
  typeof value === 'string' && EVENT_ID_SHAPE.test(value) && BigInt(value) <= MAX_EVENT_ID;

/** class-validator: `?lastEventId=` as isEventId checks it. */
export const IsEventId = (options?: ValidationOptions): PropertyDecorator =>
  ValidateBy({ name: 'isEventId', validator: { validate: isEventId } }, options);

/**
 * The id a stream resumes after: `?lastEventId=` (validated with the query) wins over the header, which is checked
 * here, on the JSON form too (the document declares it on both), so a bad header is a 400 naming it whatever the
 * Accept. Undefined: from the start.
 */
export function resumeAfter(query: string | undefined, header: string | undefined): string | undefined {
  if (header !== undefined && !isEventId(header)) {
    throw new ValidationFailedError([
      { field: 'Last-Event-ID', message: `must be an event id this stream sent (0 to ${MAX_EVENT_ID})` },
    ]);
  }
  return query ?? header;
}
