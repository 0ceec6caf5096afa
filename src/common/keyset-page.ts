import { ValidationFailedError } from './domain.errors.js';

/** Keyset pages (docs/design.md#4-http-api-all-under-v1-json): the cursor is the last row's id, base64url-encoded. */

export const UUID_CURSOR = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export const badCursor = () =>
  new ValidationFailedError([{ field: 'cursor', message: 'is not a cursor this API returned' }]);

/** The id a cursor carries, checked against the shape of the ids it pages over; undefined for the first page. */
export function decodeCursor(
  cursor: string | undefined,
  shape: RegExp | ((id: string) => boolean) = UUID_CURSOR,
): string | undefined {
  if (cursor === undefined) return undefined;
  const id = Buffer.from(cursor, 'base64url').toString('utf8');
  if (!(typeof shape === 'function' ? shape(id) : shape.test(id))) throw badCursor();
  return id;
}

/** `rows` read with `limit + 1`: the page, and the cursor of the next one when that extra row came back. */
export function pageOf<T extends { id: string }>(rows: T[], limit: number): { page: T[]; nextCursor: string | null } {
  const page = rows.slice(0, limit);
  return {
    page,
    nextCursor: rows.length > limit ? Buffer.from(page[page.length - 1].id, 'utf8').toString('base64url') : null,
  };
}
