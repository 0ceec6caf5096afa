import { type ArgumentMetadata, Injectable, PipeTransform } from '@nestjs/common';

import { ValidationFailedError } from './domain.errors.js';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** Path ids are uuids; anything else is a 400 naming the parameter (not a 404, not a database error). */
@Injectable()
export class UuidPipe implements PipeTransform<string, string> {
  transform(value: string, metadata: ArgumentMetadata): string {
    if (typeof value !== 'string' || !UUID.test(value)) {
      throw new ValidationFailedError([{ field: metadata.data ?? 'id', message: 'must be a UUID' }]);
    }
    return value.toLowerCase();
  }
}
